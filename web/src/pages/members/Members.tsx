// /app/members: the project's members and their roles, pending invitations, and inviting by
// email (GET/POST /projects/{id}/members, PATCH/DELETE /projects/{id}/members/{userId}).
import { useCallback, useEffect, useState, type FormEvent } from "react";
import { useNavigate } from "react-router";
import { api, errorMessage, type Schemas } from "../../api/client";
import { useSession } from "../../session";
import { ConfirmDialog } from "../Confirm";
import { Alert } from "../parts";
import { SelectField, TextField } from "../settings/controls";
import { placeErrors } from "../settings/fieldErrors";

type Member = Schemas["MemberBody"];
const ROLES = ["OWNER", "ADMIN", "MEMBER"] as const;
const ROLE_NAMES: Record<string, string> = { OWNER: "Owner", ADMIN: "Admin", MEMBER: "Member" };
const day = (at: string) => new Date(at).toLocaleDateString();

export function Members() {
  const { me, project, reload } = useSession();
  const navigate = useNavigate();
  const [team, setTeam] = useState<Schemas["TeamBody"] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [said, setSaid] = useState("");
  const [removing, setRemoving] = useState<Member | null>(null);
  const [inviteErrors, setInviteErrors] = useState<Record<string, string>>({});
  const [inviteError, setInviteError] = useState<string | null>(null);
  const id = project?.id ?? "";
  const role = project?.role ?? "MEMBER";
  const manages = role !== "MEMBER";

  const load = useCallback(async () => {
    if (!id) return;
    const { data, error } = await api.GET("/projects/{id}/members", { params: { path: { id } } });
    if (error) return setError(errorMessage(error));
    setError(null);
    setTeam(data);
  }, [id]);

  useEffect(() => {
    // The list is synced from the server when the project changes.
    // eslint-disable-next-line react-hooks/set-state-in-effect
    void load();
  }, [load]);

  async function changeRole(m: Member, newRole: string) {
    const { error } = await api.PATCH("/projects/{id}/members/{userId}", {
      params: { path: { id, userId: m.userId } },
      body: { role: newRole },
    });
    if (error) {
      setError(errorMessage(error));
    } else {
      setError(null);
      setSaid(`${m.email} is now ${(ROLE_NAMES[newRole] ?? newRole).toLowerCase()}.`);
    }
    await load();
    if (m.userId === me?.id) await reload();
  }

  async function remove() {
    const m = removing;
    setRemoving(null);
    if (!m) return;
    const { error } = await api.DELETE("/projects/{id}/members/{userId}", { params: { path: { id, userId: m.userId } } });
    if (error) return setError(errorMessage(error));
    setError(null);
    if (m.userId === me?.id) {
      await reload();
      navigate("/projects");
      return;
    }
    setSaid(`${m.email} was removed from the project.`);
    await load();
  }

  async function invite(e: FormEvent<HTMLFormElement>) {
    e.preventDefault();
    const form = e.currentTarget;
    const data = new FormData(form);
    const email = String(data.get("email")).trim();
    const { data: created, error, response } = await api.POST("/projects/{id}/members", {
      params: { path: { id } },
      body: { email, role: String(data.get("role")) },
    });
    if (error) {
      const placed = placeErrors(error, ["email", "role"]);
      setInviteErrors(placed.fields);
      setInviteError(placed.general);
      return;
    }
    setInviteErrors({});
    setInviteError(null);
    form.reset();
    setSaid(
      response.status === 201
        ? `${created.email} already had an account and is now a member; they were told by email.`
        : `An invitation was emailed to ${created.email}. They join once they open its link.`,
    );
    await load();
  }

  if (!project) return null;
  return (
    <section>
      <h1>Members</h1>
      <p>
        Who works on <strong>{project.name}</strong>. Owners and admins manage the members; only an owner makes
        someone an owner.
      </p>
      <p role="status">{said}</p>
      <Alert message={error} />
      {team && (
        <div className="table-wrap" tabIndex={0} role="region" aria-label="Members table">
          <table className="members">
            <caption className="visually-hidden">Members of {project.name}</caption>
            <thead>
              <tr>
                <th scope="col">Email</th>
                <th scope="col">Role</th>
                <th scope="col">Joined</th>
                <th scope="col">
                  <span className="visually-hidden">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {team.members.map((m) => {
                const self = m.userId === me?.id;
                // Only an owner changes an owner's role or grants ownership.
                const editable = manages && (role === "OWNER" || m.role !== "OWNER");
                return (
                  <tr key={m.userId}>
                    <td>
                      {m.email}
                      {self && " (you)"}
                    </td>
                    <td>
                      {editable ? (
                        <select aria-label={`Role of ${m.email}`} value={m.role} onChange={(e) => void changeRole(m, e.target.value)}>
                          {ROLES.filter((r) => role === "OWNER" || r !== "OWNER").map((r) => (
                            <option key={r} value={r}>
                              {ROLE_NAMES[r]}
                            </option>
                          ))}
                        </select>
                      ) : (
                        ROLE_NAMES[m.role] ?? m.role
                      )}
                    </td>
                    <td>{day(m.joinedAt)}</td>
                    <td>
                      {(self || editable) && (
                        <button type="button" className="secondary" onClick={() => setRemoving(m)} aria-label={self ? "Leave the project" : `Remove ${m.email}`}>
                          {self ? "Leave" : "Remove"}
                        </button>
                      )}
                    </td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        </div>
      )}
      {team && team.invitations.length > 0 && (
        <>
          <h2>Pending invitations</h2>
          <div className="table-wrap" tabIndex={0} role="region" aria-label="Pending invitations table">
            <table>
              <caption className="visually-hidden">Invitations not yet accepted</caption>
              <thead>
                <tr>
                  <th scope="col">Email</th>
                  <th scope="col">Role</th>
                  <th scope="col">Sent</th>
                  <th scope="col">Link works until</th>
                </tr>
              </thead>
              <tbody>
                {team.invitations.map((i) => (
                  <tr key={i.email}>
                    <td>{i.email}</td>
                    <td>{ROLE_NAMES[i.role] ?? i.role}</td>
                    <td>{day(i.invitedAt)}</td>
                    <td>{day(i.expiresAt)}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
          <p className="hint">Inviting the same address again sends a new link; the old one stops working.</p>
        </>
      )}
      {manages && (
        <>
          <h2>Invite someone</h2>
          <form onSubmit={(e) => void invite(e)} className="inline" noValidate>
            <TextField label="Email address" name="email" type="email" required error={inviteErrors.email} />
            <SelectField label="Role" name="role" defaultValue="MEMBER" error={inviteErrors.role}>
              {ROLES.filter((r) => role === "OWNER" || r !== "OWNER").map((r) => (
                <option key={r} value={r}>
                  {ROLE_NAMES[r]}
                </option>
              ))}
            </SelectField>
            <button type="submit">Send invitation</button>
          </form>
          <Alert message={inviteError} />
          <p className="hint">
            Someone whose account has a confirmed address joins at once. Anyone else gets an email with a link to sign up
            or to accept.
          </p>
        </>
      )}
      <ConfirmDialog
        danger
        open={removing !== null}
        title={removing?.userId === me?.id ? "Leave the project?" : `Remove ${removing?.email ?? ""}?`}
        confirmLabel={removing?.userId === me?.id ? "Leave the project" : "Remove from the project"}
        onConfirm={() => void remove()}
        onCancel={() => setRemoving(null)}
      >
        <p>
          {removing?.userId === me?.id
            ? "You lose access to this project at once; a member must invite you again to come back."
            : "They lose access to this project at once. Their account stays."}
        </p>
      </ConfirmDialog>
    </section>
  );
}
