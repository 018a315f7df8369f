import type { EmulatorState } from '../state/emulator-state.js';
import { HttpError } from './http-error.js';

/**
 * Checks that a group exists (groups are created out of band).
 * @throws {HttpError} 404 `group_not_found`
 */
export function requireGroup(state: EmulatorState, groupId: string): void {
  if (!state.groups.has(groupId)) {
    throw new HttpError(
      404,
      'group_not_found',
      `No group ${JSON.stringify(groupId.slice(0, 200))}; groups are created in the dashboard`,
    );
  }
}
