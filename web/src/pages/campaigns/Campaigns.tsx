import { useEffect, useState } from "react";
import { Link, useSearchParams } from "react-router";
import { api, errorMessage, type Schemas } from "../../api/client";
import { useSession } from "../../session";
import { Pager, useCursorPages } from "../paging";
import { Alert } from "../parts";
import { percent, statusLabel, type Campaign } from "./draft";

const PAGE = 50;
const STATUSES = Object.keys(statusLabel) as Campaign["status"][];

/** When a campaign did or will do its thing, in words. */
function when(c: Campaign): string {
  const at = (s: string) => new Date(s).toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" });
  if (c.finishedAt) return `Finished ${at(c.finishedAt)}`;
  if (c.startedAt) return `Started ${at(c.startedAt)}`;
  if (c.scheduledAt) return `Starts ${at(c.scheduledAt)}`;
  return `Created ${at(c.createdAt)}`;
}

/** The campaigns, newest first, with their status and figures. */
export function Campaigns() {
  const { project } = useSession();
  const [params, setParams] = useSearchParams();
  const status = (params.get("status") as Campaign["status"] | null) ?? undefined;
  const pages = useCursorPages({ inUrl: true });
  const cursor = pages.cursor;
  const [page, setPage] = useState<Schemas["CampaignPage"] | null>(null);
  const [total, setTotal] = useState<number | null>(null);
  const [stats, setStats] = useState<Map<string, Schemas["CampaignStats"]>>(new Map());
  const [error, setError] = useState<string | null>(null);

  useEffect(() => {
    if (!project) return;
    let live = true;
    void Promise.all([
      api.GET("/campaigns", { params: { query: { limit: PAGE, status, cursor: cursor ?? undefined } } }),
      // The figures of the campaigns that have started (the newest 100).
      api.GET("/analytics/campaign-stats", { params: { query: { page: 1, pageSize: 100 } } }),
    ]).then(([list, figures]) => {
      if (!live) return;
      setPage(list.data ?? null);
      if (list.data && !cursor) setTotal(list.data.total);
      setStats(new Map((figures.data?.data ?? []).map((b) => [b.id, b.stats])));
      setError(list.error ? errorMessage(list.error) : figures.error ? errorMessage(figures.error) : null);
    });
    return () => {
      live = false;
    };
  }, [project, status, cursor]);

  return (
    <section>
      <div className="title-row">
        <h1>Campaigns</h1>
        <Link to="/campaigns/new" className="button">
          New campaign
        </Link>
      </div>
      <div className="inline">
        <label htmlFor="campaign-status">Show</label>
        <select
          id="campaign-status"
          value={status ?? ""}
          onChange={(e) => {
            pages.reset();
            setParams(e.target.value ? { status: e.target.value } : {});
          }}
        >
          <option value="">All campaigns</option>
          {STATUSES.map((s) => (
            <option key={s} value={s}>
              {statusLabel[s]}
            </option>
          ))}
        </select>
      </div>
      <Alert message={error} />
      {page && (
        <>
          <p role="status">
            {total === null ? "" : `${total.toLocaleString()} ${total === 1 ? "campaign" : "campaigns"}.`}
          </p>
          {page.data.length > 0 && (
            // Scrolls sideways on a narrow screen: focusable, so the keyboard scrolls it too.
            <div className="table-scroll" tabIndex={0} role="region" aria-label="Campaigns table">
              <table className="campaigns">
                <caption className="visually-hidden">Campaigns, newest first</caption>
                <thead>
                  <tr>
                    <th scope="col">Name</th>
                    <th scope="col">Status</th>
                    <th scope="col">When</th>
                    <th scope="col">Recipients</th>
                    <th scope="col">Sent</th>
                    <th scope="col">Opened</th>
                    <th scope="col">Clicked</th>
                  </tr>
                </thead>
                <tbody>
                  {page.data.map((c) => {
                    const s = stats.get(c.id);
                    return (
                      <tr key={c.id}>
                        <td>
                          <Link to={`/campaigns/${c.id}`}>{c.name}</Link>
                        </td>
                        <td>{statusLabel[c.status]}</td>
                        <td>{when(c)}</td>
                        <td>{c.recipientCount.toLocaleString()}</td>
                        <td>{s ? s.sent.toLocaleString() : "–"}</td>
                        <td>{s ? `${s.opened.toLocaleString()} (${percent(s.openRate)})` : "–"}</td>
                        <td>{s ? `${s.clicked.toLocaleString()} (${percent(s.clickRate)})` : "–"}</td>
                      </tr>
                    );
                  })}
                </tbody>
              </table>
            </div>
          )}
          <Pager label="Pages of campaigns" previous={pages.previous} next={pages.after(page)} />
        </>
      )}
    </section>
  );
}
