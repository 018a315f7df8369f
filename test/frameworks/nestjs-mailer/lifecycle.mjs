// Child process of test.mjs: boots Nest with MailerModule.forRootAsync against
// the parent's emulator (EMU_URL, EMU_KEY), sends one message, closes the app,
// prints what happened, and must then exit on its own (no process.exit): a
// connection or timer left open by the transport would keep it alive.
import 'reflect-metadata';
import { NestFactory } from '@nestjs/core';
import { Module } from '@nestjs/common';
import { MailerModule, MailerService } from '@nestjs-modules/mailer';
import { EmlApiTransport } from 'nodemailer-eml-api';

async function main() {
  class AppModule {}
  Module({
    imports: [
      MailerModule.forRootAsync({
        useFactory: async () => ({
          transport: new EmlApiTransport({ apiKey: process.env.EMU_KEY, baseUrl: process.env.EMU_URL }),
          verifyTransporters: true,
          defaults: { from: 'shop@example.test' },
        }),
      }),
    ],
  })(AppModule);
  const app = await NestFactory.createApplicationContext(AppModule, { logger: false });
  const mailer = app.get(MailerService);
  const info = await mailer.sendMail({ to: 'ann@example.test', subject: 'Lifecycle', text: 'Hello' });
  await app.close();
  process.stdout.write(`${JSON.stringify({ messageId: info.messageId, closedAt: Date.now() })}\n`);
}

main().catch((err) => {
  console.error(err);
  process.exitCode = 1;
});
