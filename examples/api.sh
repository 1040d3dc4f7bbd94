#!/usr/bin/env bash
# A walk through jobrun's HTTP API with curl: enqueue, get, list, cancel, retry.
#   jobrun web &                        # serves http://127.0.0.1:9120
#   examples/api.sh [BASE_URL]          # JOBRUN_WEB_TOKEN=... when the server has a token
# Needs curl and jq. Every step prints what it got; the script stops at the first failure.
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

echo "== enqueue a job (201; the same Idempotency-Key again replays it with 200)"
job=$(call POST /jobs '{"task": "email.send", "payload": {"to": "a@example.com"}, "idempotency_key": "welcome-42"}')
echo "$job" | jq -c '{id, status, version, created}'
id=$(echo "$job" | jq -r .id)

echo "== get it"
call GET "/jobs/$id" | jq -c '{id, task, status, payload, version}'

echo "== list queued email.send jobs, newest first"
call GET "/jobs?status=queued&task=email.send&limit=10" | jq -c '[.jobs[].id]'

echo "== cancel it, only if it is still at version 0 (a stale version is a 409)"
call POST "/jobs/$id/cancel" '{"version": 0}' | jq -c '{id, status, version}'

echo "== retry it: back to queued"
call POST "/jobs/$id/retry" | jq -c '{id, status, attempts, version}'

echo "== an error is always the same envelope"
curl -sS "${auth[@]}" "$base/jobs/0" | jq -c .
