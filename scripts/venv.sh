# Sourced by the scripts: creates .venv and installs memfit with the pinned versions of constraints.txt.
# The interpreter is $PYTHON when set, else the first python3 on PATH (a pyenv or virtualenv selection included);
# a .venv made with another Python than $PYTHON names, or one that cannot run (a failed or interrupted earlier
# attempt, a removed interpreter), is made anew.
_python_version() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null; }

ensure_venv() {  # ensure_venv [EXTRA]
  local extra="${1:-}" spec="."
  [ -n "$extra" ] && spec=".[$extra]"
  local stamp=".venv/.installed-${extra:-base}"
  local python="${PYTHON:-$(command -v python3 || true)}"
  if [ -z "$python" ]; then
    echo "memfit needs Python 3.11 or newer: no python3 on PATH (or set PYTHON=/path/to/python3)" >&2
    return 1
  elif ! command -v "$python" >/dev/null; then
    echo "memfit needs Python 3.11 or newer: PYTHON=$python is not a program" >&2
    return 1
  fi
  if [ -e .venv ] && ! .venv/bin/python -c "" 2>/dev/null; then
    echo "removing a broken .venv ..." >&2
    rm -rf .venv
  elif [ -n "${PYTHON:-}" ] && [ -x .venv/bin/python ] \
    && [ "$(_python_version .venv/bin/python)" != "$(_python_version "$python")" ]; then
    echo "making .venv anew with $python (Python $(_python_version "$python"); it had $(_python_version .venv/bin/python))" >&2
    rm -rf .venv
  fi
  if [ ! -x .venv/bin/python ]; then
    if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
      echo "memfit needs Python 3.11 or newer; $python is $("$python" --version 2>&1) (set PYTHON=/path/to/python3)" >&2
      return 1
    fi
    echo "making .venv with $python (Python $(_python_version "$python"))" >&2
    "$python" -m venv .venv
  fi
  if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ constraints.txt -nt "$stamp" ]; then
    echo "installing memfit${extra:+[$extra]} and its pinned dependencies into .venv (a minute or two the first time):" >&2
    rm -f "$stamp"
    # progress: the name of each package as pip collects it, lines of up to 100 characters, shown as they come
    .venv/bin/python -m pip install --disable-pip-version-check --progress-bar off -c constraints.txt -e "$spec" \
      | awk '/^Collecting / { name = $2; sub(/[<>=!~\[;(].*/, "", name)
                              if (width + length(name) > 98) { printf "\n"; width = 0 }
                              printf " %s", name; width += length(name) + 1; fflush() }
             END { if (width) printf "\n" }' >&2
    touch "$stamp"
  fi
}
