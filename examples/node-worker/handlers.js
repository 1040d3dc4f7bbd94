// The handlers of the example Node worker: task name -> async function (payload, job).
// What one returns is the job's result (any JSON value); what one throws fails the attempt.
'use strict';

module.exports = {
  'node.add': async (payload) => ({ sum: payload.reduce((a, b) => a + b, 0), runtime: 'node' }),

  'node.upper': async (payload, job) => ({ text: String(payload).toUpperCase(), attempt: job.attempt }),

  'node.reject': async () => {
    throw Object.assign(new Error('not for this worker'), { permanent: true });
  },
};
