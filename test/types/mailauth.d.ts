// mailauth 4.x ships no types for its DKIM verifier module; only what the tests use.
declare module 'mailauth/lib/dkim/verify.js' {
  export function dkimVerify(
    input: Buffer,
    options: { resolver: (name: string, type: string) => Promise<string[][]> },
  ): Promise<{ results: unknown[] }>;
}
