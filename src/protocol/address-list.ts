/**
 * Extracts the addresses of an RFC 5322 address list: display names, comments
 * and group syntax (`Team: a@x, b@y;`) are handled; only addresses are returned.
 *
 * @example
 * parseAddressList('"Doe, Jane" <jane@x.test>, Team: a@x.test;') // ['jane@x.test', 'a@x.test']
 */
export function parseAddressList(value: string): string[] {
  const addresses: string[] = [];
  let bare = '';
  let angle: string | undefined;
  let inAngle = false;
  let quote = false;
  let comment = 0;
  const flush = (): void => {
    const address = (angle ?? bare).trim().replace(/\s+/g, '');
    if (address.length > 0) addresses.push(address);
    bare = '';
    angle = undefined;
  };
  for (let i = 0; i < value.length; i++) {
    const ch = value[i]!;
    if (quote) {
      if (ch === '\\') i++;
      else if (ch === '"') quote = false;
      continue;
    }
    if (comment > 0) {
      if (ch === '\\') i++;
      else if (ch === '(') comment++;
      else if (ch === ')') comment--;
      continue;
    }
    if (inAngle) {
      if (ch === '>') inAngle = false;
      else angle += ch;
      continue;
    }
    if (ch === '"') {
      quote = true;
      // Quoted text before an angle address is a display name, not an address.
      bare += ' ';
    } else if (ch === '(') comment++;
    else if (ch === '<') {
      inAngle = true;
      angle = '';
    } else if (ch === ':') bare = '';
    else if (ch === ',' || ch === ';') flush();
    else bare += ch;
  }
  flush();
  // A bare "display name" without an address (e.g. `undisclosed-recipients:;`) has no @.
  return addresses.filter((a) => a.includes('@'));
}
