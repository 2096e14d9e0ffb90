# Sourced by the scripts: creates .venv and installs memfit with the pinned versions of constraints.txt.
ensure_venv() {  # ensure_venv [EXTRA]
  local extra="${1:-}" spec="."
  [ -n "$extra" ] && spec=".[$extra]"
  local stamp=".venv/.installed-${extra:-base}"
  if [ ! -x .venv/bin/python ]; then
    python3.11 -m venv .venv 2>/dev/null || python3 -m venv .venv
  fi
  if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ constraints.txt -nt "$stamp" ]; then
    echo "installing memfit${extra:+[$extra]} into .venv ..." >&2
    .venv/bin/python -m pip install -q --disable-pip-version-check -c constraints.txt -e "$spec"
    touch "$stamp"
  fi
}
