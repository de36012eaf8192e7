// The project's API keys: their beginnings, and rotation behind a confirmation; the new keys are
// shown this once.
import { useState } from "react";
import { api, errorMessage, type Schemas } from "../../api/client";
import { useSession } from "../../session";
import { ConfirmDialog } from "../Confirm";
import { Alert } from "../parts";
import { CopyButton } from "./controls";

export function Keys({ project }: { project: Schemas["ProjectBody"] }) {
  const { reload } = useSession();
  const [asking, setAsking] = useState(false);
  const [rotated, setRotated] = useState<Schemas["RotatedKeys"] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const canRotate = project.role !== "MEMBER";

  async function rotate() {
    setAsking(false);
    const { data, error } = await api.POST("/users/@me/projects/{id}/regenerate-keys", { params: { path: { id: project.id } } });
    if (error) return setError(errorMessage(error));
    setError(null);
    setRotated(data);
    await reload();
  }

  return (
    <section aria-labelledby="settings-keys">
      <h2 id="settings-keys">API keys</h2>
      <p>
        The public key may only record events from your pages (<code>POST /v1/track</code>); the secret key may do
        everything, so keep it on your server. Herald shows only their beginnings here.
      </p>
      <dl className="facts">
        <dt>Public key</dt>
        <dd>
          <code>{project.publicKeyHint}</code>
        </dd>
        <dt>Secret key</dt>
        <dd>
          <code>{project.secretKeyHint}</code>
        </dd>
      </dl>
      {rotated && (
        <div role="status" className="card">
          <h3>New keys</h3>
          <p>Store the new secret key now: it is not shown again.</p>
          <dl className="facts">
            <dt>New public key</dt>
            <dd>
              <code>{rotated.publicKey}</code>
            </dd>
            <dt>New secret key</dt>
            <dd>
              <code>{rotated.secretKey}</code>
            </dd>
          </dl>
          <p>
            <CopyButton value={rotated.secretKey} label="Copy the new secret key" />
          </p>
        </div>
      )}
      {canRotate ? (
        <button type="button" onClick={() => setAsking(true)}>
          Rotate keys
        </button>
      ) : (
        <p>Only owners and admins rotate the keys.</p>
      )}
      <Alert message={error} />
      <ConfirmDialog
        danger
        open={asking}
        title="Rotate the API keys?"
        confirmLabel="Rotate keys now"
        onConfirm={() => void rotate()}
        onCancel={() => setAsking(false)}
      >
        <p>
          Both keys are replaced, and <strong>the old public and secret keys stop working at once</strong>: every
          server, script or page that uses them gets refused until you give it the new ones.
        </p>
      </ConfirmDialog>
    </section>
  );
}
