import { accessSync, constants } from 'node:fs';
import { chromium, type Browser } from 'playwright-core';

/**
 * The Chromium binary the browser tests drive: `CHROMIUM_PATH`, or Debian's
 * `chromium` package at /usr/bin/chromium. Playwright's own browser downloads
 * are never used (no network here but the package registries).
 */
export function chromiumPath(): string {
  return process.env.CHROMIUM_PATH || '/usr/bin/chromium';
}

/** Whether the Chromium binary of {@link chromiumPath} exists and is executable. */
export function hasChromium(): boolean {
  try {
    accessSync(chromiumPath(), constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/**
 * Launches headless Chromium with no sandbox (tests run as root in containers)
 * and no background network traffic. Each launch gets a fresh temporary
 * profile from Playwright, removed again by `browser.close()`.
 * @example
 * const browser = await launchChromium();
 * const page = await browser.newPage();
 * await browser.close();
 */
export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: chromiumPath(),
    timeout: 60_000,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--disable-quic',
    ],
  });
}
