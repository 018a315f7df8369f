/**
 * The ideal sender, the transport's yardstick: Nodemailer builds the message
 * (its stream transport, to a Buffer), Base64, JSON.stringify, one undici
 * request. Nothing else: no spooling, no timeouts or retries, no idempotency
 * key, no checks of the envelope, no spans.
 */
import nodemailer from 'nodemailer';
import type { SendMailOptions } from 'nodemailer';
import { Agent } from 'undici';

/** Sends one message as `sendMail` does; `close()` ends its connections. */
export function idealSender(baseUrl: string, connections: number) {
  const compiler = nodemailer.createTransport({ streamTransport: true, buffer: true });
  const agent = new Agent({ connections });
  const origin = new URL(baseUrl).origin;
  const post = async (eml: Buffer): Promise<void> => {
    const res = await agent.request({
      origin,
      path: '/v1/send/eml',
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': 'k' },
      body: JSON.stringify({ mail: eml.toString('base64') }),
    });
    await res.body.text();
    if (res.statusCode !== 202) throw new Error(`the sink answered ${res.statusCode}`);
  };
  return {
    async send(message: SendMailOptions): Promise<void> {
      const built = await compiler.sendMail(message);
      await post(built.message as Buffer);
    },
    /** The request alone, of a message built already. */
    post,
    close: () => agent.close(),
  };
}
