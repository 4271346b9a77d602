#!/usr/bin/env bash
# Checks a built Debian package the way a distribution would, without installing it:
#   - lintian: any E: tag fails (W: and I: tags are printed, not fatal);
#   - the release binary names no path of the checkout it was built in (a build-tree path would point
#     package users at a directory they do not have);
#   - systemd-analyze verify on the packaged user units, extracted from the .deb (`dpkg-deb -x`), with
#     ExecStart= pointed at the extracted binary (the package is not installed here) and the man pages
#     of Documentation= looked up in the package;
#   - `harness demo` run by the extracted binary with no HARNESS_* variables: it must find the packaged
#     wrappers and fake engines next to itself (<exe dir>/../share/harness/) and finish its run.
# Usage: packaging/deb/check.sh DEB [BINARY]; BINARY defaults to the target dir's release/harness.
# Needs lintian, binutils (strings), dpkg-deb, systemd-analyze and man.
set -euo pipefail
deb=$(realpath "${1:?usage: check.sh DEB [BINARY]}")
cd "$(dirname "$0")/../.."
checkout=$PWD
bin=${2:-$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')/release/harness}
fail=0

echo "check: lintian $deb"
# lintian exits non-zero on an error tag too; the E: lines decide here, its status only when it
# printed none (a lintian that could not run).
out=$(lintian --display-info "$deb" 2>&1) && rc=0 || rc=$?
printf '%s\n' "$out" | grep -v '^running with root privileges is not recommended!$' || true
if printf '%s\n' "$out" | grep -q '^E: '; then
  echo "check: lintian reports errors" >&2
  fail=1
elif [ "$rc" != 0 ]; then
  echo "check: lintian failed (exit $rc)" >&2
  fail=1
fi

echo "check: no build-tree paths in $bin"
if strings "$bin" | grep -F "$checkout"; then
  echo "check: the release binary names the checkout $checkout (lines above)" >&2
  fail=1
fi

echo "check: systemd-analyze verify of the packaged units"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
dpkg-deb -x "$deb" "$work/root"
mkdir -m 700 "$work/run"
mkdir "$work/units"
units=("$work"/root/usr/lib/systemd/user/*)
[ -f "${units[0]}" ] || { echo "check: the package has no units in /usr/lib/systemd/user" >&2; exit 1; }
for u in "${units[@]}"; do
  while read -r exe; do
    [ -x "$work/root$exe" ] || { echo "check: ${u##*/}: ExecStart $exe is not in the package" >&2; fail=1; }
  done < <(sed -n 's/^ExecStart=[-@:+!]*\([^ ]*\).*/\1/p' "$u")
  sed "s|^ExecStart=\([-@:+!]*\)/|ExecStart=\1$work/root/|" "$u" > "$work/units/${u##*/}"
done
# --user needs a runtime dir; MANPATH makes the Documentation=man: check find the packaged page. Any
# output (an unknown key, a bad value: verify warns and still exits 0) fails.
if ! out=$(XDG_RUNTIME_DIR=$work/run MANPATH=$work/root/usr/share/man systemd-analyze --user verify "$work"/units/* 2>&1) || [ -n "$out" ]; then
  printf '%s\n' "$out" >&2
  echo "check: systemd-analyze verify complained about the packaged units" >&2
  fail=1
fi

echo "check: harness demo from the extracted package"
demo_log=$work/demo.log
env -u HARNESS_FIXTURES -u HARNESS_WRAPPERS -u HARNESS_HOME -u HARNESS_API_ADDR \
  "$work/root/usr/bin/harness" demo --pace fast --listen 127.0.0.1:0 --dir "$work/demo" > "$demo_log" 2>&1 &
demo=$!
for _ in $(seq 1 240); do
  grep -qE '^[0-9:]+ +run finished$' "$demo_log" && break
  kill -0 "$demo" 2>/dev/null || break
  sleep 0.25
done
# SIGTERM, not SIGINT: a background job of a script ignores SIGINT. The demo stops its run and the API.
kill -TERM "$demo" 2>/dev/null || true
for _ in $(seq 1 40); do
  kill -0 "$demo" 2>/dev/null || break
  sleep 0.25
done
kill -KILL "$demo" 2>/dev/null && echo "check: the demo ignored SIGTERM for 10 s" >> "$demo_log"
wait "$demo" && rc=0 || rc=$?
if ! grep -qE '^[0-9:]+ +run finished$' "$demo_log" || [ "$rc" != 0 ]; then
  cat "$demo_log" >&2
  echo "check: the packaged demo did not finish its run (exit $rc)" >&2
  fail=1
fi

[ "$fail" = 0 ] && echo "check: ok"
exit "$fail"
