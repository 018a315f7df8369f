/** Abort reason when a call's `timeouts.total` elapses. */
export class TotalTimeoutReason extends Error {
  override readonly name = 'TimeoutError';
  constructor(readonly ms: number) {
    super(`overall timeout of ${ms} ms elapsed`);
  }
}

/** Abort reason for calls still running when the client is closed with `{ abort: true }`. */
export class ClientClosedReason extends Error {
  override readonly name = 'AbortError';
  constructor() {
    super('the client was closed');
  }
}
