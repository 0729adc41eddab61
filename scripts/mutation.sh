#!/usr/bin/env bash
# Mutation testing of the core (mutmut, pinned in the dev extra; config in
# pyproject.toml [tool.mutmut]). The run happens in a throwaway copy of the
# working tree (what `git ls-files` lists as tracked or untracked and not
# ignored, uncommitted edits included), never in place: the working tree's
# src/ is imported live by other checkouts through the editable install.
# Niced, one process.
#
#   bash scripts/mutation.sh                      # every mutant of the core modules
#   bash scripts/mutation.sh 'frontier_core._ledger*'   # one module (mutmut name globs)
#
# Prints mutmut's summary and the surviving mutants; each survivor must be
# killed by a test marked `mutation` (the selection mutmut runs) or written
# up in proofs/MUTANTS.md (the journal's, src/frontier_core/journal, in
# proofs/MUTANTS_JOURNAL.md). Set MUTATION_DIR to keep (and resume) a run in a
# fixed place: the copy is made once, so delete the directory to measure
# newer sources.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
python=${PYTHON:-$root/.venv/bin/python}
[ -x "$python" ] || { bash scripts/setup.sh dev; python=$root/.venv/bin/python; }
mutmut="$(dirname "$python")/mutmut"
work=${MUTATION_DIR:-$(mktemp -d -t frontier-mutation-XXXXXX)}
[ -n "${MUTATION_DIR:-}" ] || trap 'rm -rf "$work"' EXIT
if [ ! -e "$work/pyproject.toml" ]; then
    mkdir -p "$work"
    # Only what mutmut and the collected tests read; files deleted in the
    # working tree but still in the index are skipped.
    git ls-files -z --cached --others --exclude-standard -- src tests proofs pyproject.toml README.md docs |
        while IFS= read -r -d '' path; do
            [ -f "$path" ] && printf '%s\0' "$path"
        done |
        tar --null -T - -cf - | tar -xf - -C "$work"
fi
cd "$work"
# mutmut puts the mutated copy (mutants/src) first on sys.path and runs the
# tests marked `mutation` (-m mutation tests/core): they leave out
# test_exhaustive's large-bound exploration (a minute a mutant); its
# small-scope exploration is the workhorse instead.
# mutmut exits non-zero when mutants survive, which is the report below;
# but a run whose clean test run failed (a collection error, a failing
# test) tests no mutant at all and must not read as "no surviving mutants".
log="$work/mutmut-run.log"
nice -n 10 "$mutmut" run --max-children 1 "$@" 2>&1 | tee "$log" || true
if grep -q "failed to collect stats" "$log"; then
    echo "mutation.sh: the clean test run failed, so no mutant was tested (see above)" >&2
    exit 2
fi
# The mutants left alive (mutmut lists those outside a partial run as "not checked").
"$mutmut" results | grep -v ': not checked$' || echo "no surviving mutants"
