import { createHash } from 'node:crypto';
import type { ApiImage } from '../../protocol/api-types.js';

/** How long a hosted image lives after its last use: 180 days. */
export const IMAGE_RETENTION_MS = 180 * 24 * 60 * 60 * 1000;

/** A hosted image. */
export interface HostedImage {
  sha256: string;
  data: Buffer;
  mimeType: ApiImage['mimeType'];
  /** When it was last sent; it expires {@link IMAGE_RETENTION_MS} later. */
  lastUsedAt: Date;
}

/** Content types of the image format words. */
export const IMAGE_CONTENT_TYPES: Record<ApiImage['mimeType'], string> = {
  PNG: 'image/png',
  JPEG: 'image/jpeg',
  GIF: 'image/gif',
  WEBP: 'image/webp',
};

/**
 * Images embedded in JSON sends, hosted at `/images/{sha256}`. Sending the same
 * bytes again resets the expiry; an expired image is gone.
 */
export class ImageStore {
  readonly #images = new Map<string, HostedImage>();

  /** Stores (or refreshes) an image. @returns its SHA-256 hex digest */
  put(data: Buffer, mimeType: ApiImage['mimeType'], now: Date): string {
    const sha256 = createHash('sha256').update(data).digest('hex');
    const existing = this.#images.get(sha256);
    if (existing && !this.#expired(existing, now)) {
      existing.lastUsedAt = now;
      existing.mimeType = mimeType;
    } else {
      this.#images.set(sha256, { sha256, data, mimeType, lastUsedAt: now });
    }
    return sha256;
  }

  /** The image if it exists and has not expired at `now`; expired images are deleted. */
  get(sha256: string, now: Date): HostedImage | undefined {
    const image = this.#images.get(sha256);
    if (!image) return undefined;
    if (this.#expired(image, now)) {
      this.#images.delete(sha256);
      return undefined;
    }
    return image;
  }

  /** When an image expires. */
  static expiresAt(image: HostedImage): Date {
    return new Date(image.lastUsedAt.getTime() + IMAGE_RETENTION_MS);
  }

  /** Images not expired at `now`. */
  list(now: Date): HostedImage[] {
    return [...this.#images.values()].filter((image) => !this.#expired(image, now));
  }

  clear(): void {
    this.#images.clear();
  }

  #expired(image: HostedImage, now: Date): boolean {
    return now.getTime() >= image.lastUsedAt.getTime() + IMAGE_RETENTION_MS;
  }
}
