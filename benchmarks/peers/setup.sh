#!/usr/bin/env bash
# Install the peer job queues that benchmarks/compare.py measures jobrun against, each from
# PyPI into a virtualenv of its own under benchmarks/.venv-peers/ (git-ignored). Nothing of
# theirs is vendored. Celery runs on Redis: Debian's redis-server is installed when missing
# (root only); compare.py starts and stops its own redis-server on a free loopback port.
#
#   bash benchmarks/peers/setup.sh              # latest releases
#   PGQUEUER=0.26.3 bash benchmarks/peers/setup.sh   # pin a version (PROCRASTINATE=, CELERY= too)
#
# Re-running reuses existing virtualenvs and upgrades them to the requested versions.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)/.venv-peers"
python="${PYTHON:-python3}"
mkdir -p "$root"

spec() {  # name, pinned version (may be empty)
    if [[ -n "${2:-}" ]]; then echo "$1==$2"; else echo "$1"; fi
}

make_venv() {  # dir, packages...
    local name="$1" dir="$root/$1"; shift
    if [[ ! -x "$dir/bin/python" ]]; then
        "$python" -m venv "$dir"
    fi
    # (pip's warnings about this machine's optional local indexes are noise: dropped)
    "$dir/bin/python" -m pip install --quiet --upgrade pip 2>&1 | grep -v '^WARNING: Location' || true
    "$dir/bin/python" -m pip install --quiet --upgrade "$@" 2>&1 | grep -v '^WARNING: Location' || true
    "$dir/bin/python" -c 'import sys' || exit 1
    echo "$name -> $dir: $("$dir/bin/python" -m pip freeze | grep -iE '^(pgqueuer|procrastinate|celery|redis|asyncpg|psycopg|uvloop|kombu)[=[]' | tr '\n' ' ')"
}

# pgqueuer: asyncio; it talks to PostgreSQL through asyncpg (its recommended driver), with
# uvloop as the event loop as its docs suggest for throughput.
make_venv pgqueuer "$(spec pgqueuer "${PGQUEUER:-}")" asyncpg uvloop "psycopg[binary]"
# procrastinate: asyncio worker on psycopg 3 (its connector), concurrency option.
make_venv procrastinate "$(spec procrastinate "${PROCRASTINATE:-}")" "psycopg[binary,pool]"
# celery: the prefork pool, on Redis (broker and result backend not used: ignore_result).
make_venv celery "$(spec "celery[redis]" "${CELERY:-}")" "psycopg[binary]"

if ! command -v redis-server >/dev/null 2>&1; then
    if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
        apt-get install -y -qq redis-server >/dev/null || {
            apt-get update -qq && apt-get install -y -qq redis-server >/dev/null; } || \
            echo "setup: redis-server could not be installed; compare.py will skip Celery" >&2
    else
        echo "setup: no redis-server (install Debian's redis-server); compare.py will skip Celery" >&2
    fi
fi
echo "peers ready under $root"
