'use strict';
// The signature code against docs/signed-calls.md's test vector, and the
// checks around it: `node --test` (run by e2e TestNodeExampleEndpoint).

const test = require('node:test');
const assert = require('node:assert/strict');
const { sign, verify, parseDeadline } = require('../src/signature');

const key = Buffer.from('0123456789abcdef-test-key');
const target = '/app/jobs/report?day=2024-05-01&x=%20y';
const headers = {
  'idempotency-key': 'slotpoller-job-42',
  'x-slotpoller-attempt': '1',
  'x-slotpoller-deadline': '2024-05-01T12:00:30.000Z',
  'x-slotpoller-job': '42',
  'x-slotpoller-node': 'web-01',
  'x-slotpoller-timeout-ms': '30000',
  'x-slotpoller-token': '7',
};
const body = Buffer.from('{"id":42}');
const vector = 'v2=1fc092da394486e4ac2d15c51f1149b3c07ec6cc2e3484250590f5e816b51bc8';

// What Node's req.headersDistinct holds for those headers.
const distinct = (h) => Object.fromEntries(Object.entries(h).map(([k, v]) => [k, [v]]));

test('sign gives the test vector of docs/signed-calls.md', () => {
  assert.equal(sign(key, 'POST', target, '1714572000', headers, body), vector);
});

test('verify accepts the vector within 5 minutes, in either case of hex', () => {
  const signed = { ...distinct(headers), 'x-slotpoller-timestamp': ['1714572000'] };
  for (const sig of [vector, `v2=${vector.slice(3).toUpperCase()}`]) {
    const got = verify([Buffer.from('old-key-of-a-rotation'), key], 'POST', target,
      { ...signed, 'x-slotpoller-signature': [sig] }, body, 1714572000 + 300);
    assert.deepEqual(got, { signature: vector, timestamp: 1714572000 });
  }
});

test('verify refuses what docs/signed-calls.md refuses', () => {
  const signed = { ...distinct(headers), 'x-slotpoller-timestamp': ['1714572000'], 'x-slotpoller-signature': [vector] };
  const refused = (h, why, k = key, now = 1714572000, b = body) =>
    assert.throws(() => verify([k], 'POST', target, h, b, now), { status: 401 }, why);
  refused(signed, 'stale', key, 1714572000 + 301);
  refused(signed, 'from the future', key, 1714572000 - 301);
  refused(signed, 'another key', Buffer.from('another-key-of-16+'));
  refused(signed, 'another body', key, 1714572000, Buffer.from('{"id":43}'));
  refused({ ...signed, 'x-slotpoller-task': [''] }, 'an absent header made present and empty');
  refused({ ...signed, 'x-slotpoller-attempt': ['1', '1'] }, 'a repeated signed header');
  refused({ ...signed, 'x-slotpoller-timestamp': ['01714572000'] }, 'a leading zero');
  refused({ ...signed, 'x-slotpoller-signature': [`v1=${vector.slice(3)}`] }, 'v1');
  const { 'x-slotpoller-signature': _, ...unsigned } = signed;
  refused(unsigned, 'no signature');
  assert.throws(() => verify([], 'POST', target, signed, body, 1714572000), { status: 401 }, 'no key configured');
});

test('parseDeadline reads RFC 3339 only', () => {
  assert.equal(parseDeadline('2024-05-01T12:00:30.000Z'), Date.UTC(2024, 4, 1, 12, 0, 30));
  assert.equal(parseDeadline('2024-05-01T14:00:30.5+02:00'), Date.UTC(2024, 4, 1, 12, 0, 30, 500));
  assert.equal(parseDeadline('May 1, 2024'), null);
});
