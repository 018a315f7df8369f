// A user's strict TypeScript code against every entry point. test/package/types.test.ts compiles it
// against the packed package in four module setups (commonjs with node10 resolution, node16,
// nodenext, bundler); `npm run typecheck` compiles it against src/. Never run: it only has to
// compile, and each @ts-expect-error has to stay an error.
import nodemailer from 'nodemailer';
import type { EmlApiClient } from 'nodemailer-eml-api';
import {
  EmlApiError,
  EmlApiTransport,
  type EmlApiClientSettings,
  type EmlApiSentMessageInfo,
} from 'nodemailer-eml-api';
import { startEmulator, type Emulator } from 'nodemailer-eml-api/emulator';
import {
  EmlApiQueueTransport,
  type EmlApiQueueTransportOptions,
  startOutboxWorker,
  type OutboxQueuedMessageInfo,
  type OutboxWorker,
  type OutboxWorkerEvents,
  type OutboxJob,
  type OutboxSendResult,
} from 'nodemailer-eml-api/queue';
import { startEmlApiRelay, type EmlApiRelay } from 'nodemailer-eml-api/relay';
import {
  API_KEY_HEADER,
  API_PATHS,
  encodePathSegment,
  type ApiErrorBody,
  type SendAcceptedResponse,
  type StandardEmailRequest,
} from 'nodemailer-eml-api/protocol';

export function contract(): string {
  const body: StandardEmailRequest = {
    to: [{ email: 'b@x.test' }],
    from: { email: 'a@x.test' },
    subject: 's',
    textContent: { text: 'x' },
  };
  const answer: SendAcceptedResponse = { id: 'i', messageId: '<m@x.test>', recipients: 1 };
  const refusal: ApiErrorBody = { error: { code: 'invalid_api_key', message: 'no' } };
  return API_PATHS.sendEmail + API_KEY_HEADER + encodePathSegment('..') + body.subject + answer.id + refusal.error.code;
}

export function settings(client: EmlApiClient): number {
  const view: EmlApiClientSettings = client.settings;
  // A read-only view: the dispatcher is not in it, nothing in it can be assigned.
  // @ts-expect-error not among the settings
  void view.dispatcher;
  // @ts-expect-error read-only
  client.settings.maxConnections = 1;
  return view.timeouts.total + view.retry.attempts;
}

export async function transport(): Promise<string> {
  const emu: Emulator = await startEmulator({ apiKeys: [{ key: 'k', scopes: ['sender'] }] });
  const own = new EmlApiTransport({ apiKey: emu.apiKey, baseUrl: emu.url });
  own.on('idle', () => undefined);
  await new Promise((resolve) => own.once('idle', resolve));
  // @ts-expect-error the transport has no such event
  own.on('sent', () => undefined);
  const transporter = nodemailer.createTransport(own);
  const info: EmlApiSentMessageInfo = await transporter.sendMail({ from: 'a@x.test', to: 'b@x.test', text: 'x' });
  // group and tracking are typed on sendMail through module augmentation: no casts.
  await transporter.sendMail({ from: 'a@x.test', subject: 'news', html: '<p>x</p>', group: 'newsletter' });
  await transporter.sendMail({ from: 'a@x.test', to: 'b@x.test', subject: 's', html: 'x', tracking: true });
  try {
    await transporter.sendMail({ from: 'a@x.test', to: 'b@x.test', text: 'x' });
  } catch (err) {
    if (err instanceof EmlApiError && err.code === 'EAUTH') return err.message;
  }
  return info.messageId + String(info.id);
}

export async function outbox(connection: string): Promise<string> {
  const queue = new EmlApiQueueTransport({ connection, retry: { attempts: 10 } });
  queue.on('idle', () => undefined);
  const transporter = nodemailer.createTransport(queue);
  const info = (await transporter.sendMail({
    from: 'a@x.test',
    to: 'b@x.test',
    text: 'x',
    idempotencyKey: 'k1',
  })) as OutboxQueuedMessageInfo;

  const worker: OutboxWorker = await startOutboxWorker({ connection, apiKey: 'k', baseUrl: 'https://x.test' });
  // Events infer their arguments: no annotations, under strict.
  worker.on('sent', (job, result) => console.log(job.id, result.response, result.id?.length));
  worker.on('failed', (job, err) => console.log(job.data.kind, err.code, err.apiCode, err.mayHaveBeenAccepted));
  worker.on('retrying', (_job, err, delayMs) => console.log(err.permanent, delayMs.toFixed()));
  worker.once('warning', (message) => console.log(message.toUpperCase()));
  worker.on('error', (err) => console.log(err.message));
  const sent: OutboxWorkerEvents['sent'] = await new Promise((resolve) =>
    worker.once('sent', (job: OutboxJob, result: OutboxSendResult) => resolve([job, result])),
  );
  // @ts-expect-error no such event
  worker.on('sant', () => undefined);
  // @ts-expect-error a result is not a number
  worker.on('sent', (_job, result: number) => result);
  // One way to start a worker: OutboxWorker is a type, not a constructor.
  // @ts-expect-error only refers to a type
  void new OutboxWorker({ connection, apiKey: 'k', baseUrl: 'https://x.test' });
  await worker.close({ abort: true });

  type OutboxJobOptions = NonNullable<EmlApiQueueTransportOptions['jobOptions']>;
  const keep: OutboxJobOptions = { removeOnComplete: { age: 86_400 }, removeOnFail: false, priority: 1 };
  // @ts-expect-error true removes each job as it finishes: the runtime refuses it
  const removeSent: OutboxJobOptions = { removeOnComplete: true };
  // @ts-expect-error the same for failed jobs
  const removeFailed: OutboxJobOptions = { removeOnFail: true };
  void [keep, removeSent, removeFailed];
  return info.queueId + info.response + sent[1].response;
}

export async function relay(connection: string): Promise<number> {
  // A queue transport of the app is the relay's store (docs/relay.md, Store-and-forward).
  const queue = new EmlApiQueueTransport({ connection });
  const started: EmlApiRelay = await startEmlApiRelay({ apiKey: 'k', baseUrl: 'https://x.test', port: 0, queue });
  const { givenUp } = await started.close({ grace: 1000 });
  await queue.close();
  return givenUp;
}
