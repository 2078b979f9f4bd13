#!/usr/bin/env bash
# docs/cli.md is what the program's --help says: regenerates it with scripts/gen-cli-docs.sh
# into a temporary file and fails, with a one-line hint naming the first differing line and the
# command that rewrites the file, when the committed one differs (a flag added, renamed or
# re-described without regenerating the reference).
# Usage: cli_docs_test.sh PATH/TO/starzero [DOC]   (DOC: default docs/cli.md of this checkout)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=${1:?usage: cli_docs_test.sh PATH/TO/starzero [DOC]}
doc=${2:-$root/docs/cli.md}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
[ -f "$doc" ] || { echo "FAIL: $doc does not exist; write it: scripts/gen-cli-docs.sh $bin $doc"; exit 1; }
bash "$root/scripts/gen-cli-docs.sh" "$bin" "$work/cli.md"
if cmp -s "$work/cli.md" "$doc"; then
  echo "ok: $doc matches the --help of $bin"
  exit 0
fi
# The first differing line, for the hint; the diff itself follows, shortened.
line=$({ diff "$doc" "$work/cli.md" || true; } | grep -m1 -oE '^[0-9]+')
echo "FAIL: $doc is stale at line $line (differs from the --help of $bin); regenerate: scripts/gen-cli-docs.sh $bin $doc"
diff -u --label "$doc (committed)" --label "generated" "$doc" "$work/cli.md" | head -20
exit 1
