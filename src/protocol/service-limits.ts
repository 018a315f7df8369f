/**
 * The service's limits, as CONTRACT.md states them and the emulator enforces
 * them: defined once, here, and imported by every component that derives a
 * default from them.
 */

/**
 * The largest HTTP request the service accepts, in bytes: 50 MiB. A message
 * travels Base64-encoded in JSON (4/3 of its size), so the largest message a
 * send carries is a little under 37.5 MiB.
 * @example
 * await startEmulator({ maxRequestSize: MAX_REQUEST_SIZE / 2 });
 */
export const MAX_REQUEST_SIZE = 50 * 1024 * 1024;
