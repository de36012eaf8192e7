// The topics page's words, apart for unit tests.
import type { Schemas } from "../../api/client";

/** What a topic's default subscription means for a contact. */
export function topicDefaultWords(d: Schemas["TopicDefault"]): string {
  return d === "OPT_IN"
    ? "Contacts are subscribed until they opt out."
    : "Contacts are subscribed only once they opt in.";
}

/** Why a topic could not be deleted: a 409 in plain words, other errors as the API says them. */
export function deleteError(name: string, status: number, message: string): string {
  if (status === 409) {
    return `“${name}” is still used by a template or by a campaign that is not finished, so it cannot be deleted. Remove it from them (or let the campaign finish) first.`;
  }
  return message;
}
