// The API client: types generated from ../openapi/openapi.json (`npm run gen`, into
// generated/, outside the sources build.rs watches, since every build writes it), calls through
// openapi-fetch with the session cookie (HttpOnly, so never readable here) and, on project
// endpoints, the chosen project in X-Project-Id.
import createClient, { type Middleware } from "openapi-fetch";
import type { components, paths } from "../../generated/api-schema";

export type Schemas = components["schemas"];

let project: string | null = null;

/** The project dashboard calls act on (sent as X-Project-Id). */
export function setProject(id: string | null) {
  project = id;
}

const projectHeader: Middleware = {
  onRequest({ request }) {
    if (project && !request.headers.has("X-Project-Id")) {
      request.headers.set("X-Project-Id", project);
    }
    return request;
  },
};

export const api = createClient<paths>({ baseUrl: "", credentials: "include" });
api.use(projectHeader);

/**
 * The message of an API error body, with the field errors, in plain words. It reads both
 * shapes: the usual one (`{ success, error: { message, errors, suggestion }, timestamp }`) and
 * the one of `/v1/send` and `/v1/verify` (`{ code, error, message, errors }`, `PublicErrorBody`).
 */
export function errorMessage(error: unknown): string {
  const body = (typeof error === "object" ? error : undefined) as
    | Partial<Schemas["ErrorBody"]>
    | Partial<Schemas["PublicErrorBody"]>
    | null
    | undefined;
  const detail: { message?: string; errors?: Schemas["FieldError"][]; suggestion?: string } | undefined =
    body && typeof body.error === "object" ? body.error : body && "message" in body ? body : undefined;
  if (!detail?.message) return "Something went wrong; try again.";
  const fields = (detail.errors ?? [])
    .map((f) => `${f.field}: ${f.message}`)
    .join("; ");
  const message = fields ? `${detail.message} (${fields})` : detail.message;
  return detail.suggestion ? `${message}. ${detail.suggestion}` : message;
}
