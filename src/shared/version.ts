/**
 * Version of this package, reported as the transport's `version` and in the
 * default `User-Agent`. A test keeps it equal to package.json.
 */
export const VERSION: string = '0.1.0';
