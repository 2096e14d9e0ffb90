# Sourced by the scripts: creates .venv and installs memfit with the pinned versions of constraints.txt.
# A .venv that cannot run (a failed or interrupted earlier attempt, a removed interpreter) is made anew.
ensure_venv() {  # ensure_venv [EXTRA]
  local extra="${1:-}" spec="."
  [ -n "$extra" ] && spec=".[$extra]"
  local stamp=".venv/.installed-${extra:-base}"
  if [ -e .venv ] && ! .venv/bin/python -c "" 2>/dev/null; then
    echo "removing a broken .venv ..." >&2
    rm -rf .venv
  fi
  if [ ! -x .venv/bin/python ]; then
    local python
    python=$(command -v python3.11 || command -v python3)
    if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
      echo "memfit needs Python 3.11 or newer; $python is $("$python" --version 2>&1)" >&2
      return 1
    fi
    "$python" -m venv .venv
  fi
  if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ constraints.txt -nt "$stamp" ]; then
    echo "installing memfit${extra:+[$extra]} and its pinned dependencies into .venv (a minute or two the first time) ..." >&2
    rm -f "$stamp"
    .venv/bin/python -m pip install -q --disable-pip-version-check -c constraints.txt -e "$spec"
    touch "$stamp"
  fi
}
