import { describe, expect, it } from 'vitest';
import { exchangeRetryClass, statusVerdict } from '../../src/shared/failure.js';
import { EmlApiError } from '../../src/shared/eml-api-error.js';
import { bodyShape, errorFromResponse, readServiceResponse } from '../../src/http/request-error.js';
import { failureAction, failureOutcome, mayHaveBeenAccepted } from '../../src/queue/failure-policy.js';
import { serviceFailureReply } from '../../src/relay/smtp-replies.js';

// status, client retry, permanent, answer says maybe accepted, outbox counts it possibly processed,
// worker action, worker outcome on the first of 3 attempts, relay reply (client's own key), what a refusal is about
const TABLE = [
  [300, 'never', false, false, false, 'retry', 'retry', 451, undefined],
  [400, 'never', true, false, false, 'fail', 'refused', 554, 'message'],
  [401, 'never', true, false, false, 'fail', 'held', 550, 'key'],
  [403, 'never', true, false, false, 'fail', 'held', 550, 'key'],
  [404, 'never', true, false, false, 'fail', 'held', 451, 'endpoint'],
  [405, 'never', true, false, false, 'fail', 'held', 451, 'endpoint'],
  [408, 'never', false, false, false, 'retry', 'retry', 451, undefined],
  [409, 'never', true, false, false, 'fail', 'held', 554, 'request'],
  [413, 'never', true, false, false, 'fail', 'refused', 552, 'message'],
  [422, 'never', true, false, false, 'fail', 'refused', 554, 'message'],
  [429, 'safe', false, false, false, 'pause', 'retry', 451, undefined],
  [500, 'never', false, false, true, 'retry', 'retry', 451, undefined],
  [501, 'never', false, false, true, 'retry', 'retry', 451, undefined],
  [502, 'ambiguous', false, true, true, 'retry', 'retry', 451, undefined],
  [503, 'safe', false, false, false, 'retry', 'retry', 451, undefined],
  [504, 'ambiguous', false, true, true, 'retry', 'retry', 451, undefined],
  [599, 'never', false, false, true, 'retry', 'retry', 451, undefined],
] as const;

describe('a failed answer is judged once', () => {
  it.each(TABLE)(
    'status %i: client retry %s, permanent %s, may have been accepted %s, possibly processed %s',
    (status, retry, permanent, accepted, processed, _action, _outcome, _reply, refuses) => {
      expect(statusVerdict(status)).toEqual({
        retry,
        permanent,
        mayHaveBeenAccepted: accepted,
        possiblyProcessed: processed,
        ...(refuses === undefined ? {} : { refuses }),
      });
    },
  );

  it.each(TABLE)(
    'status %i: the client error, the worker and the relay render the verdict',
    (status, _retry, permanent, accepted, processed, action, outcome, reply) => {
      const res = readServiceResponse(status, 'application/json', '{"error":{"code":"x","message":"no"}}');
      const err = errorFromResponse('POST /v1/send/eml', res, 'secret-key');
      expect(err).toBeInstanceOf(EmlApiError);
      expect(err.code).toBe(status === 401 || status === 403 ? 'EAUTH' : 'EAPI');
      expect(err.permanent).toBe(permanent);
      expect(err.mayHaveBeenAccepted).toBe(accepted);
      expect(mayHaveBeenAccepted(err)).toBe(accepted || processed);
      expect(failureAction(err).kind).toBe(action);
      if (action !== 'pause') expect(failureOutcome(err, 1, 3).kind).toBe(outcome);
      const smtp = serviceFailureReply(err, 'client');
      expect(smtp.code).toBe(reply);
      // A failure the same request can get past is never bounced.
      if (!permanent) expect(smtp.code).toBeLessThan(500);
    },
  );

  it('a request that got no answer may be repeated safely only if it was not sent', () => {
    expect(exchangeRetryClass(false)).toBe('safe');
    expect(exchangeRetryClass(true)).toBe('ambiguous');
  });

  it.each([
    ['', undefined, 'empty'],
    [' \r\n', 'text/html', 'empty'],
    ['<!doctype html><p>hi</p>', 'text/html', 'html'],
    ['  <html>', undefined, 'html'],
    ['ok', 'text/plain', 'text'],
    ['{"id":"1"}', 'application/json', 'json'],
    ['[1]', undefined, 'json'],
    ['{broken', 'application/json', 'text'],
  ] as const)('a 2xx body %j (%s) is named once: %s', (text, type, shape) => {
    expect(bodyShape(readServiceResponse(200, type, text))).toBe(shape);
  });
});
