import type { RemoveFromGroupResponse } from '../../protocol/api-types.js';
import { HttpError } from './http-error.js';
import { addressProblem } from '../../protocol/address-rules.js';
import { rejectUnknownFields } from './reject-unknown-fields.js';
import type { Operation } from './operation.js';
import { requireGroup } from './require-group.js';

/** `DELETE /v1/group/{groupId}`: removes one member; 404 `not_a_member` when absent. */
export const removeFromGroupOperation: Operation = {
  scopes: ['group:remove'],
  hasBody: true,
  idempotent: false,
  async handle(ctx) {
    const [groupId] = ctx.params as [string];
    requireGroup(ctx.state, groupId);
    const body = await ctx.json();
    rejectUnknownFields(body, ['email']);
    if (typeof body.email !== 'string')
      throw new HttpError(400, 'invalid_request', 'email is required and must be a string');
    const problem = addressProblem(body.email);
    if (problem)
      throw new HttpError(400, 'invalid_address', `email ${problem}: ${JSON.stringify(body.email.slice(0, 100))}`);
    if (!ctx.state.groups.remove(groupId, body.email)) {
      throw new HttpError(404, 'not_a_member', `${body.email} is not a member of ${groupId}`);
    }
    const answer: RemoveFromGroupResponse = { removed: true };
    return { status: 200, body: answer };
  },
};
