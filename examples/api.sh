#!/usr/bin/env bash
# A walk through jobrun's HTTP API with curl, against the README's quickstart:
#   bin/jobrun-master -A examples.tasks -c 2 &   # a master that runs the example tasks
#   bin/jobrun web &                             # serves http://127.0.0.1:9120
#   examples/api.sh [BASE_URL]                   # JOBRUN_WEB_TOKEN=... when the server has a token
# Enqueue a `hello` job an hour ahead (so it waits, queued), get it, list it, cancel it while
# it is still at version 0, retry it (queued again, to run now), wait for the master to run
# it, read its attempt. Needs curl and jq. Every step prints what it got; the script stops at
# the first failure.
set -euo pipefail
base=${1:-http://127.0.0.1:9120}/api/v1
auth=()
if [ -n "${JOBRUN_WEB_TOKEN:-}" ]; then
    auth=(-H "Authorization: Bearer $JOBRUN_WEB_TOKEN")
fi
call() {  # call METHOD PATH [JSON]: print the body, fail on an HTTP error
    curl -sS --fail-with-body "${auth[@]}" -X "$1" "$base$2" \
         -H 'Content-Type: application/json' ${3:+--data "$3"}
}

echo "== enqueue a hello job to run in an hour (201; the same Idempotency-Key again replays it with 200)"
body='{"task": "hello", "payload": {"name": "api.sh"}, "delay": "1h", "idempotency_key": "api.sh-'"$$-$RANDOM"'"}'
job=$(call POST /jobs "$body")
echo "$job" | jq -c '{id, status, version, created}'
id=$(echo "$job" | jq -r .id)
call POST /jobs "$body" | jq -c '{id, status, version, created}'

echo "== get it"
call GET "/jobs/$id" | jq -c '{id, task, status, payload, version}'

echo "== list queued hello jobs, newest first"
call GET "/jobs?status=queued&task=hello&limit=10" | jq -c '[.jobs[].id]'

echo "== cancel it, only if it is still at version 0 (a stale version is a 409)"
call POST "/jobs/$id/cancel" '{"version": 0}' | jq -c '{id, status, version}'

echo "== retry it: back to queued, to run now"
call POST "/jobs/$id/retry" | jq -c '{id, status, attempts, version}'

echo "== wait (up to 30 s) for a master to run it"
for _ in $(seq 150); do
    status=$(call GET "/jobs/$id" | jq -r .status)
    case $status in succeeded|dead|cancelled) break ;; esac
    sleep 0.2
done
if [ "$status" != succeeded ]; then
    echo "job $id is $status: is a master running the example app? bin/jobrun-master -A examples.tasks" >&2
    exit 1
fi
call GET "/jobs/$id/attempts" | jq -c '[.[] | {attempt, outcome, result}]'

echo "== an error is always the same envelope"
curl -sS "${auth[@]}" "$base/jobs/0" | jq -c .
