import type { Socket } from 'node:net';
import { buildConnector } from 'undici';

/**
 * How long a socket whose write failed keeps reading for the answer the
 * service may have sent before it closed, in ms. The answer of a server that
 * refused an upload is already in the socket when the write fails (it answers,
 * then closes), and a reset makes the read end at once: this only bounds the
 * wait for a peer that does neither.
 * @example
 * const connect = earlyAnswerConnector({ timeout: 10_000 }, EARLY_ANSWER_WAIT);
 */
export const EARLY_ANSWER_WAIT = 2_000;

/**
 * An undici connector (its Agent's `connect` option) whose sockets still read
 * the answer of a server that refused a request before reading all of it.
 *
 * A server over its body limit answers `413` as soon as it knows and closes
 * the connection without reading the rest; the client, still uploading, then
 * fails to write (EPIPE, ECONNRESET). Node destroys a socket on a failed
 * write, and the answer, already received, is lost with it unless undici
 * happened to read it first: the send failed as a connection error (retried,
 * by the outbox for a day) instead of `413` (permanent). These sockets keep
 * their read side open after a failed write until the answer is read, the
 * connection ends, or {@link EARLY_ANSWER_WAIT} passes; undici then completes
 * the request with the answer, or fails it with the write's own error.
 *
 * @param options undici's connector options (timeout, lookup...)
 * @param wait how long to keep reading after a failed write, in ms @default EARLY_ANSWER_WAIT
 * @example
 * new Agent({ connect: earlyAnswerConnector({ timeout: 10_000, lookup }) });
 */
export function earlyAnswerConnector(
  options: buildConnector.BuildOptions,
  wait = EARLY_ANSWER_WAIT,
): buildConnector.connector {
  const connect = buildConnector(options);
  return (opts, callback) =>
    connect(opts, (...args: Parameters<buildConnector.Callback>) => {
      if (args[0] === null) keepReadingAfterFailedWrite(args[1], wait);
      callback(...args);
    });
}

/**
 * Holds back, once, the error of a write the peer refused, so that the read
 * side delivers what the peer sent before it closed. The error cannot be let
 * through and the destruction merely delayed: a failed write marks the read
 * side of the socket failed too, and it reads no more. So the write's
 * callback is held: undici sees a write that has not finished (and writes no
 * more), the socket goes on reading, and the answer completes the request
 * (undici then closes the socket). Without an answer, the read ends with the
 * peer's reset, or the write fails after `wait`, as it would have at once.
 */
function keepReadingAfterFailedWrite(socket: Socket, wait: number): void {
  let held = false;
  const hold = (callback: (error?: Error | null) => void) => (err?: Error | null) => {
    if (held || !isFailedWrite(err) || socket.destroyed) return callback(err);
    held = true;
    const timer = setTimeout(() => callback(err), wait);
    timer.unref();
    socket.once('close', () => clearTimeout(timer));
  };
  const write = socket._write.bind(socket);
  socket._write = (chunk, encoding, callback) => write(chunk, encoding, hold(callback));
  const writev = socket._writev?.bind(socket);
  if (writev) socket._writev = (chunks, callback) => writev(chunks, hold(callback));
}

/** A write the peer refused: it reset or closed the connection. A failed read is not one. */
function isFailedWrite(err: unknown): err is Error {
  const { code, syscall } = (err ?? {}) as { code?: unknown; syscall?: unknown };
  return (code === 'EPIPE' || code === 'ECONNRESET') && syscall !== 'read';
}
