import type { SiteSection } from '../http/site-section.js';
import type { EmulatorState } from '../state/emulator-state.js';
import { hostedImageFile, IMAGES_PREFIX } from './hosted-image-file.js';
import { sendPage } from './page-answer.js';
import { UNSUBSCRIBE_PREFIX, unsubscribePage } from './unsubscribe-page.js';

/**
 * The pages people and mail clients reach without an API key, from any
 * host, as on the real service: the hosted unsubscribe form (any method, so
 * wrong ones get their 405 here) and hosted images.
 */
export function publicPages(state: EmulatorState): SiteSection {
  return {
    owns: (_method, path) => path.startsWith(UNSUBSCRIBE_PREFIX) || path.startsWith(IMAGES_PREFIX),
    async serve(req, res, path) {
      const answer = path.startsWith(IMAGES_PREFIX)
        ? hostedImageFile(state, req, path)
        : await unsubscribePage(state, req, path);
      sendPage(res, req.method, answer);
    },
  };
}
