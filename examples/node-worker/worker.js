#!/usr/bin/env node
// A jobrun remote worker for Node.js: plain node (18 or later: fetch), no npm packages.
//
//   node worker.js --url http://127.0.0.1:9120 --token-file token --queue emails --slots 8
//
// It speaks jobrun web's worker protocol (docs/workers-anywhere.md): registers, claims up to
// its free slots with a long poll, runs each job's handler (handlers.js, or --handlers FILE:
// an object of task name -> async function (payload, job)), renews the leases it holds every
// lease TTL / 3, and reports outcomes in batches under each job's lease token. A handler that
// throws fails the attempt (the server retries it with its backoff); one that throws an error
// with `permanent = true` ends the job dead; `retryIn` (seconds) on the error sets the delay.
// A report refused with 409 means those leases were lost: their outcomes are dropped.
// SIGTERM or SIGINT: no more claims, running jobs finish and are reported, then goodbye.
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');

const CLAIM_WAIT = 5;     // seconds a claim waits on the server for a job
const BATCH = 200;        // outcomes per report at most

function options(argv) {
  const o = { queues: [], slots: 4, name: os.hostname().split('.')[0].slice(0, 40) || 'node',
              handlers: path.join(__dirname, 'handlers.js') };
  for (let i = 0; i < argv.length; i++) {
    const [flag, value] = [argv[i], argv[i + 1]];
    if (flag === '--url') o.url = value.replace(/\/+$/, '');
    else if (flag === '--token-file') o.tokenFile = value;
    else if (flag === '--queue') o.queues.push(...value.split(','));
    else if (flag === '--slots') o.slots = parseInt(value, 10);
    else if (flag === '--name') o.name = value;
    else if (flag === '--handlers') o.handlers = path.resolve(value);
    else throw new Error(`unknown option ${flag}`);
    i++;
  }
  if (!o.url || !o.queues.length || !(o.slots >= 1)) {
    throw new Error('usage: node worker.js --url URL --queue Q[,Q] [--token-file F] [--slots N]'
                    + ' [--name NAME] [--handlers FILE]');
  }
  return o;
}

function log(event, fields = {}) {
  const parts = Object.entries(fields).map(([k, v]) => `${k}=${JSON.stringify(v)}`);
  process.stderr.write(`${new Date().toISOString()} ${event} ${parts.join(' ')}\n`);
}

class ApiError extends Error {
  constructor(status, body) {
    super(`${status} ${body.code || '?'}: ${body.message || ''}`);
    this.status = status;
    this.fields = body.fields || {};
  }
}

class Worker {
  constructor(o, handlers) {
    this.o = o;
    this.handlers = handlers;
    // The token goes in a header, never in a log line or an error.
    const token = o.tokenFile ? fs.readFileSync(o.tokenFile, 'utf8').trim() : '-';
    this.headers = { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' };
    this.held = new Map();   // job id -> lease token, from the claim until its report is taken
    this.running = 0;
    this.outbox = [];        // outcomes not yet accepted
    this.stopping = false;
    this.waiters = [];
  }

  wake() { for (const resolve of this.waiters.splice(0)) resolve(); }
  changed(ms) {
    return new Promise((resolve) => {
      this.waiters.push(resolve);
      if (ms) setTimeout(resolve, ms).unref();
    });
  }

  async call(method, route, body) {
    const response = await fetch(`${this.o.url}/api/v1${route}`, {
      method, headers: this.headers, body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout((CLAIM_WAIT + 30) * 1000),
    });
    if (response.status === 204) return null;
    const text = await response.text();
    let data = {};
    try { data = JSON.parse(text); } catch (e) { data = { message: text.slice(0, 200) }; }
    if (!response.ok) throw new ApiError(response.status, data);
    return data;
  }

  async register() {
    const reply = await this.call('POST', '/workers', {
      name: this.o.name, queues: this.o.queues, credits: this.o.slots,
      tasks: Object.keys(this.handlers), version: `jobrun-node/${process.version}`,
    });
    this.id = reply.worker;
    this.ttl = reply.lease_ttl;
    log('remote.registered', { worker: this.id, queues: this.o.queues.join(','), slots: this.o.slots });
  }

  async claimLoop() {
    let failures = 0;
    while (!this.stopping) {
      const free = this.o.slots - this.held.size;
      if (free <= 0) { await this.changed(); continue; }
      let reply;
      try {
        reply = await this.call('POST', `/workers/${this.id}/claim`, { max: free, wait: CLAIM_WAIT });
        failures = 0;
      } catch (err) {
        if (err.status === 404) { this.held.clear(); await this.register(); continue; }
        failures++;
        log('remote.unreachable', { error: String(err.message), retry: failures });
        await this.changed(Math.min(5000, 200 * 2 ** failures));
        continue;
      }
      for (const job of reply.jobs) {
        this.held.set(job.id, job.token);
        if (this.stopping) this.finish(job, { outcome: 'released' });
        else this.run(job);
      }
    }
  }

  async run(job) {
    this.running++;
    let outcome;
    const handler = this.handlers[job.task];
    try {
      if (!handler) throw Object.assign(new Error(`unknown task ${job.task}`), { permanent: true });
      const result = await handler(job.payload, job);
      outcome = { outcome: 'succeeded', result: result === undefined ? null : result };
    } catch (err) {
      const e = err instanceof Error ? err : new Error(String(err));
      outcome = { outcome: 'failed', error: `${e.name}: ${e.message}`.slice(0, 2000),
                  traceback: String(e.stack || '').slice(0, 16000), permanent: !!e.permanent };
      if (typeof e.retryIn === 'number') outcome.retry_in = e.retryIn;
    } finally {
      this.running--;
    }
    this.finish(job, outcome);
  }

  finish(job, outcome) {
    if (this.held.get(job.id) !== job.token) return;  // the lease was lost meanwhile
    this.outbox.push({ id: job.id, token: job.token, ...outcome });
    this.wake();
  }

  settle(ids) {
    const gone = new Set(ids);
    this.outbox = this.outbox.filter((o) => !gone.has(o.id));
    for (const id of gone) this.held.delete(id);
    this.wake();
  }

  async reportLoop() {
    let failures = 0;
    for (;;) {
      if (!this.outbox.length) {
        if (this.stopping && this.running === 0) return;
        await this.changed();
        continue;
      }
      const batch = this.outbox.slice(0, BATCH);
      try {
        await this.call('POST', `/workers/${this.id}/outcomes`, { outcomes: batch });
        failures = 0;
        this.settle(batch.map((o) => o.id));
      } catch (err) {
        if (err.status === 409) {  // lost leases: drop those, send the others again
          const lost = Object.keys(err.fields).filter((k) => k.startsWith('outcomes.'))
            .map((k) => Number(k.split('.')[1]));
          log('remote.lease_lost', { jobs: lost.length });
          this.settle(lost);
        } else if (err.status >= 400 && err.status < 500) {
          log('remote.report_refused', { error: String(err.message) });
          this.settle(batch.map((o) => o.id));
        } else {
          failures++;
          log('remote.unreachable', { error: String(err.message), retry: failures });
          await this.changed(Math.min(5000, 200 * 2 ** failures));
        }
      }
    }
  }

  async renew() {
    const jobs = [...this.held].map(([id, token]) => ({ id, token }));
    try {
      const reply = await this.call('POST', `/workers/${this.id}/renew`, { jobs });
      for (const id of reply.lost) {
        log('remote.lease_lost', { job: id });
        this.held.delete(id);
        this.outbox = this.outbox.filter((o) => o.id !== id);
      }
    } catch (err) {
      log('remote.renew_failed', { error: String(err.message) });
    }
  }

  async main() {
    await this.register();
    const renewer = setInterval(() => this.renew(), (this.ttl / 3) * 1000);
    const stop = () => { this.stopping = true; this.wake(); };
    process.on('SIGTERM', stop);
    process.on('SIGINT', stop);
    const reports = this.reportLoop();
    await this.claimLoop();
    await reports;  // every running job finished and reported
    clearInterval(renewer);
    try { await this.call('DELETE', `/workers/${this.id}`); } catch (err) { /* gone already */ }
    log('remote.stopped', { worker: this.id });
  }
}

if (require.main === module) {
  let o;
  try { o = options(process.argv.slice(2)); } catch (err) {
    process.stderr.write(`worker.js: error: ${err.message}\n`);
    process.exit(2);
  }
  new Worker(o, require(o.handlers)).main().then(() => process.exit(0), (err) => {
    process.stderr.write(`worker.js: error: ${err.message}\n`);
    process.exit(1);
  });
}

module.exports = { Worker, options };
