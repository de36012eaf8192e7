import { Link } from "react-router";
import { api } from "../../api/client";
import { useSession } from "../../session";
import { useRequest } from "../loading";
import { Alert } from "../parts";

/** The project's segments with their member counts (the API lists them all, unpaged). */
export function Segments() {
  const { project } = useSession();
  const { data: segments, error } = useRequest((signal) => (project ? api.GET("/segments", { signal }) : null), [project]);

  return (
    <section>
      <h1>Segments</h1>
      <p>
        A segment is a group of contacts: <strong>dynamic</strong> when its conditions decide who is in it,{" "}
        <strong>static</strong> when you add and remove its members yourself.
      </p>
      <p>
        <Link to="/segments/new" className="seg-button">
          New segment
        </Link>
      </p>
      <Alert message={error} />
      {segments && segments.length === 0 && <p>No segment yet.</p>}
      {segments && segments.length > 0 && (
        <div className="seg-scroll">
          <table>
            <caption className="visually-hidden">Segments</caption>
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Type</th>
                <th scope="col">Members</th>
                <th scope="col">Last changed</th>
              </tr>
            </thead>
            <tbody>
              {segments.map((s) => (
                <tr key={s.id}>
                  <td>
                    <Link to={`/segments/${s.id}`}>{s.name}</Link>
                  </td>
                  <td>{s.type === "DYNAMIC" ? "Dynamic" : "Static"}</td>
                  <td>{s.memberCount.toLocaleString()}</td>
                  <td>{new Date(s.updatedAt).toLocaleDateString()}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}
