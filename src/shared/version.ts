/** This package's version, the transport's `version` and in the default `User-Agent`; a test keeps it equal to package.json. */
export const VERSION: string = '0.1.0';
