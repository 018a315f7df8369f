/**
 * The form in which two spellings of one mailbox compare equal, as the
 * service delivers them: ASCII letters case-insensitively (the service, and
 * the emulator, fold case), every other character exactly as written.
 *
 * Nothing else is folded, on purpose: no Unicode normalisation, no Unicode
 * case folding, no IDNA mapping, no quotes dropped. Each of those makes two
 * spellings one mailbox for the relay that the service may keep apart, and a
 * header listing both (`victim@example.test`, `victim@𝐞xample.test`,
 * `victim@ｅxample.test`...) would then be mailed once per spelling for one
 * `RCPT TO`. Stricter than the service is safe: two spellings the relay keeps
 * apart must each be in `RCPT TO`. So an internationalised domain is written
 * the same way (`xn--` or Unicode) in `RCPT TO` and in the header; and a
 * quoted local part the relay reads only where the quotes are needed (it
 * refuses `"ann"@x`, which mailparser reads as `"ann"@x` in angle brackets
 * and as `ann@x` without).
 *
 * @example
 * addressKey('Ann@Example.TEST') === addressKey('ann@example.test') // true
 * addressKey('ann@xn--bcher-kva.example') === addressKey('ann@bücher.example') // false
 */
export function addressKey(address: string): string {
  return asciiLowerCase(address);
}

/** The text with A-Z made a-z and nothing else changed (`toLowerCase` also folds non-ASCII letters, and the Kelvin sign to k). */
export function asciiLowerCase(text: string): string {
  return text.replace(/[A-Z]+/g, (run) => run.toLowerCase());
}
