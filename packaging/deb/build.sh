#!/usr/bin/env bash
# Builds the Debian package: one release build, then the man page and the shell completions that the
# built binary prints (`harness man`, `harness completions SHELL`) written where the
# [package.metadata.deb] assets in Cargo.toml expect them (target/release/deb-assets/; cargo-deb maps
# `target/release/` to the real target dir, CARGO_TARGET_DIR included), then `cargo deb --no-build`
# (the binary it packages is the one just built; no second build), and adds DEBIAN/md5sums. Needs
# cargo-deb (`cargo install cargo-deb --locked`) and dpkg-deb. Prints the .deb's path on its last line.
set -euo pipefail
cd "$(dirname "$0")/../.."

command -v cargo-deb >/dev/null || { echo "build.sh: needs cargo-deb: cargo install cargo-deb --locked" >&2; exit 1; }

cargo build --release --locked
target=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
[ -n "$target" ] || { echo "build.sh: cargo metadata named no target directory" >&2; exit 1; }
bin=$target/release/harness
assets=$target/release/deb-assets
rm -rf "$assets"
mkdir -p "$assets"

# harness(1) and a page per command (harness-run(1), …: harness(1) names them).
"$bin" man --dir "$assets/man"
# -n: no name or timestamp in the gzip header, so the same page gives the same bytes.
gzip -9n "$assets"/man/*.1
"$bin" completions bash > "$assets/harness.bash"
"$bin" completions zsh > "$assets/_harness"
"$bin" completions fish > "$assets/harness.fish"
for f in "$assets"/* "$assets"/man/*; do
  [ -d "$f" ] || [ -s "$f" ] || { echo "build.sh: $f is empty" >&2; exit 1; }
done

deb=$(cargo deb --no-build --locked "$@" | tail -n 1)
[ -f "$deb" ] || { echo "build.sh: cargo deb named no package ($deb)" >&2; exit 1; }

# cargo-deb writes no DEBIAN/md5sums (what `dpkg --verify` and debsums check installed files against):
# unpack, add it, pack again with the same owner (root), compression and file dates.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
dpkg-deb -R "$deb" "$work/pkg"
(cd "$work/pkg" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z | xargs -0 md5sum) > "$work/md5sums"
install -m 644 "$work/md5sums" "$work/pkg/DEBIAN/md5sums"
dpkg-deb --root-owner-group -Zxz -b "$work/pkg" "$deb" >/dev/null
echo "$deb"
