/**
 * How a failed request may be repeated: `safe` when the service surely did not process it (refused, reset before the
 * request was written, DNS, 429, 503), `ambiguous` when it may have (timeout or reset after sending, 502, 504), else
 * `never`.
 */
export type RetryClass = 'safe' | 'ambiguous' | 'never';

/**
 * What a failed answer of the service means, decided here only: the client, the outbox and the relay render it.
 * @example statusVerdict(502) // { retry: 'ambiguous', permanent: false, mayHaveBeenAccepted: true, possiblyProcessed: true }
 * statusVerdict(413).refuses // 'message'
 */
export interface StatusVerdict {
  /** Whether the client may repeat the request. */
  retry: RetryClass;
  /** Repeating the same request cannot succeed. */
  permanent: boolean;
  /** The answer itself says the request may have been accepted (a gateway lost it). */
  mayHaveBeenAccepted: boolean;
  /** The service may have processed the request: any 5xx but 503, which the contract keeps for "not processed". */
  possiblyProcessed: boolean;
  /**
   * What a permanent refusal is about: `message` (400, 413, 422: these bytes can never be sent), `key` (401, 403),
   * `endpoint` (404, 405: no send endpoint at the base URL), `request` (another 4xx); absent when not permanent.
   */
  refuses?: 'message' | 'key' | 'endpoint' | 'request';
}

/** The verdict on a non-2xx HTTP status. */
export function statusVerdict(status: number): StatusVerdict {
  const gateway = status === 502 || status === 504;
  const permanent = isPermanentStatus(status);
  return {
    retry: status === 429 || status === 503 ? 'safe' : gateway ? 'ambiguous' : 'never',
    permanent,
    mayHaveBeenAccepted: gateway,
    possiblyProcessed: status >= 500 && status !== 503,
    ...(permanent ? { refuses: refusal(status) } : {}),
  };
}

function refusal(status: number): StatusVerdict['refuses'] {
  if (status === 400 || status === 413 || status === 422) return 'message';
  if (status === 401 || status === 403) return 'key';
  if (status === 404 || status === 405) return 'endpoint';
  return 'request';
}

/** How a request that got no answer may be repeated: once it was sent, the service may have processed it. */
export function exchangeRetryClass(sent: boolean): RetryClass {
  return sent ? 'ambiguous' : 'safe';
}

/** 4xx except 408 (timeout) and 429 (rate limited): the same request can never succeed. */
export function isPermanentStatus(status: number | undefined): boolean {
  return status !== undefined && status >= 400 && status < 500 && status !== 408 && status !== 429;
}

/**
 * Whether a failed key check (`verify()`) means the base URL is not the service's: a 2xx to its empty send, which the
 * service always refuses (a web server or single-page app behind a wrong URL, answering every path). Nothing sent
 * there is delivered, so a relay or a worker does not start.
 */
export function answeredAsNoService(err: unknown): boolean {
  const status = (err as { responseCode?: unknown } | null)?.responseCode;
  return typeof status === 'number' && status >= 200 && status < 300;
}
