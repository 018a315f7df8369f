/** Replaces every occurrence of the API key in a text. */
export function redact(text: string, apiKey: string): string {
  return apiKey.length > 0 && text.includes(apiKey) ? text.split(apiKey).join('[redacted]') : text;
}
