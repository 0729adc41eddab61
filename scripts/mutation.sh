#!/usr/bin/env bash
# Mutation testing of the core (mutmut, pinned in the dev extra; config in
# pyproject.toml [tool.mutmut]). The run happens in a throwaway git worktree
# of HEAD, never in place: the working tree's src/ is imported live by other
# checkouts through the editable install. Niced, one process.
#
#   bash scripts/mutation.sh                      # every mutant of the four core modules
#   bash scripts/mutation.sh 'frontier_core._ledger*'   # one module (mutmut name globs)
#
# Prints mutmut's summary and the surviving mutants; each survivor must be
# killed by tests/core/test_mutants.py or written up in proofs/MUTANTS.md.
# Set MUTATION_DIR to keep (and resume) a run in a fixed place.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
python=${PYTHON:-$root/.venv/bin/python}
[ -x "$python" ] || { bash scripts/setup.sh dev; python=$root/.venv/bin/python; }
mutmut="$(dirname "$python")/mutmut"
work=${MUTATION_DIR:-$(mktemp -d -t frontier-mutation-XXXXXX)}
if [ ! -e "$work/.git" ]; then
    rmdir "$work" 2>/dev/null || true
    git worktree add --detach "$work" HEAD >/dev/null
    [ -n "${MUTATION_DIR:-}" ] || trap 'git -C "$root" worktree remove --force "$work"' EXIT
fi
cd "$work"
# mutmut puts the mutated copy (mutants/src) first on sys.path. The test
# selection leaves out test_exhaustive's large-bound exploration (a minute a
# mutant); tests/core/test_mutants.py explores the small bounds instead.
nice -n 10 "$mutmut" run --max-children 1 "$@" || true
# The mutants left alive (mutmut lists those outside a partial run as "not checked").
"$mutmut" results | grep -v ': not checked$' || echo "no surviving mutants"
