import type { GroupCheckResponse } from '../../protocol/api-types.js';
import type { Operation } from './operation.js';
import { requireGroup } from './require-group.js';

/** `GET /v1/group/{groupId}/check/{email}`: `{ "member": true | false }`. */
export const checkGroupOperation: Operation = {
  scopes: ['group:insert', 'group:remove', 'group.sender'],
  hasBody: false,
  idempotent: false,
  handle(ctx) {
    const [groupId, email] = ctx.params as [string, string];
    requireGroup(ctx.state, groupId);
    const answer: GroupCheckResponse = { member: ctx.state.groups.isMember(groupId, email) };
    return Promise.resolve({ status: 200, body: answer });
  },
};
