'use strict';
// The checks of docs/signed-calls.md ("What an endpoint must check") and
// the deadline rule of docs/endpoints.md ("The call"), on node:crypto alone.
// Nothing here touches a database or the network: the endpoint passes in
// what it read, and the test vector of docs/signed-calls.md checks sign().

const crypto = require('node:crypto');

/** The signature window, either way (check 2). */
const MAX_AGE_SECONDS = 300;

/** The headers a v2 signature covers, in canonical order ("How the signature is built"). */
const SIGNED_HEADERS = [
  'idempotency-key',
  'x-slotpoller-attempt',
  'x-slotpoller-deadline',
  'x-slotpoller-job',
  'x-slotpoller-node',
  'x-slotpoller-scheduled-for',
  'x-slotpoller-task',
  'x-slotpoller-timeout-ms',
  'x-slotpoller-token',
];

/** An answer the endpoint gives instead of doing the work: its status, a short JSON body, and the reason for the log. */
class Refusal extends Error {
  constructor(status, body, log = '') {
    super(log || body.error || String(status));
    this.name = 'Refusal';
    this.status = status;
    this.body = body;
  }
}

// Node hands header values over as latin1 strings, one character per byte
// received: back to those bytes, the values are signed as sent.
const bytes = (s) => Buffer.from(s, 'latin1');
const trimSpaces = (s) => s.replace(/^[ \t]+|[ \t]+$/g, '');

/**
 * The v2 signature of a request, "v2=<lowercase hex>".
 *
 * @param {Buffer|string} key the signing key's bytes (a string: its UTF-8 bytes)
 * @param {string} method the request method as sent
 * @param {string} target the raw request target: path and query as in the request line
 * @param {string} timestamp X-Slotpoller-Timestamp as received
 * @param {Record<string, string>} headers lower-case names to single values; a signed header not in it is absent
 * @param {Buffer} body the raw body
 */
function sign(key, method, target, timestamp, headers, body) {
  const hmac = crypto.createHmac('sha256', key);
  hmac.update(bytes(`v2\n${method}\n${target}\n${timestamp}\n`));
  for (const name of SIGNED_HEADERS) {
    // Present: "name:value" without surrounding spaces and tabs; absent:
    // the bare name with no colon, so absent and empty differ.
    const value = Object.hasOwn(headers, name) ? `${name}:${trimSpaces(headers[name])}` : name;
    hmac.update(bytes(`${value}\n`));
  }
  hmac.update(body);
  return `v2=${hmac.digest('hex')}`;
}

/**
 * Checks 1 to 5 of docs/signed-calls.md on a request and returns the
 * accepted signature (lowercase) with its timestamp; throws a 401 Refusal
 * otherwise. The caller gets "unauthorized" only: the reason goes to the log.
 *
 * @param {Buffer[]} keys the accepted keys: the current one and, during a rotation, the previous one
 * @param {Record<string, string[]>} headersDistinct Node's req.headersDistinct: every value of each header
 * @param {number} now Unix seconds of this endpoint's clock
 */
function verify(keys, method, target, headersDistinct, body, now) {
  const refuse = (why) => new Refusal(401, { error: 'unauthorized' }, why);
  if (keys.length === 0) {
    throw refuse('no signing key configured (JOBPAGES_SIGNING_KEY)');
  }
  // Check 1: the two headers exactly once, each signed header at most once.
  // Node would join a repeated header's values with ", ": counted here
  // instead, so a repetition is refused by name.
  const once = (name) => {
    const values = headersDistinct[name] ?? [];
    if (values.length > 1) {
      throw refuse(`header ${name} appears ${values.length} times`);
    }
    return values[0];
  };
  const timestamp = once('x-slotpoller-timestamp');
  const signature = once('x-slotpoller-signature');
  if (timestamp === undefined || signature === undefined) {
    throw refuse('no X-Slotpoller-Timestamp or X-Slotpoller-Signature header');
  }
  const headers = {};
  for (const name of SIGNED_HEADERS) {
    const value = once(name);
    if (value !== undefined) {
      headers[name] = value;
    }
  }
  // Check 2: decimal Unix seconds, no sign, no leading zeros, within 5
  // minutes of this clock either way.
  const ts = trimSpaces(timestamp);
  if (!/^(0|[1-9][0-9]{0,17})$/.test(ts)) {
    throw refuse(`X-Slotpoller-Timestamp "${timestamp}" is not Unix seconds`);
  }
  const age = now - Number(ts);
  if (Math.abs(age) > MAX_AGE_SECONDS) {
    throw refuse(`X-Slotpoller-Timestamp ${ts} is ${age} s from this clock, more than ${MAX_AGE_SECONDS}`);
  }
  // Check 3: v2 only (this example has no nodes older than v2).
  const sig = trimSpaces(signature);
  if (!/^v2=[0-9a-fA-F]{64}$/.test(sig)) {
    throw refuse('X-Slotpoller-Signature is not v2=<64 hex digits>');
  }
  const received = Buffer.from(`v2=${sig.slice(3).toLowerCase()}`, 'latin1');
  // Checks 4 and 5: the raw target, the timestamp as received, each
  // accepted key, compared in constant time, every key tried.
  let valid = false;
  for (const key of keys) {
    const want = Buffer.from(sign(key, method, target, ts, headers, body), 'latin1');
    valid = crypto.timingSafeEqual(want, received) || valid;
  }
  if (!valid) {
    throw refuse(`X-Slotpoller-Signature does not match ${method} ${target}`);
  }
  return { signature: received.toString('latin1'), timestamp: Number(ts) };
}

/** Unix milliseconds of an RFC 3339 time, or null when it is not one. */
function parseDeadline(value) {
  // Date.parse alone takes many other forms: the RFC's shape first.
  const m = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d{1,9})?(Z|[+-]\d\d:\d\d)$/i.exec(value.trim());
  if (m === null) {
    return null;
  }
  const whole = Date.parse(m[1] + m[3].toUpperCase());
  if (Number.isNaN(whole)) {
    return null;
  }
  return whole + (m[2] === undefined ? 0 : Number(`0${m[2]}`) * 1000);
}

/**
 * Refuses to start (or commit) work that cannot end before
 * X-Slotpoller-Deadline, when the node gives up on the call: a 503, which
 * the node retries on a later attempt (docs/endpoints.md, "The answer").
 * A call without the header (one made by hand) has no deadline.
 *
 * @param {string|undefined} deadline the header's value
 * @param {number} nowMs Date.now()
 * @param {number} workMs how long the work may take at most
 * @param {string} when for the log: which step asked
 */
function requireTime(deadline, nowMs, workMs, when) {
  if (deadline === undefined) {
    return;
  }
  const at = parseDeadline(deadline);
  if (at === null) {
    throw new Refusal(400, { error: 'X-Slotpoller-Deadline is not an RFC 3339 time' });
  }
  if (nowMs + workMs > at) {
    throw new Refusal(503, { error: 'deadline too near: not started' },
      `${when}: X-Slotpoller-Deadline ${deadline} is ${(at - nowMs) / 1000} s away, the work needs up to ${workMs / 1000} s`);
  }
}

module.exports = { MAX_AGE_SECONDS, SIGNED_HEADERS, Refusal, sign, verify, parseDeadline, requireTime };
