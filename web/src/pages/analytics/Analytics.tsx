import { useEffect, useState } from "react";
import { Link, useSearchParams } from "react-router";
import { api, errorMessage, type Schemas } from "../../api/client";
import { useSession } from "../../session";
import { Alert, ChartWithTable } from "../parts";
import { Bars, SERIES, SeriesTable, seriesLabels, TimeseriesChart } from "./charts";
import { isPeriod, percent, PERIODS, rangeOf, type Period } from "./period";

type Metric = Schemas["CampaignMetric"];
const METRICS: { id: Metric; label: string; rate: boolean }[] = [
  { id: "openRate", label: "Open rate", rate: true },
  { id: "clickRate", label: "Click rate", rate: true },
  { id: "bounceRate", label: "Bounce rate", rate: true },
  { id: "sent", label: "Emails sent", rate: false },
  { id: "opened", label: "Opens", rate: false },
  { id: "clicked", label: "Clicks", rate: false },
];

const zone = Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";

interface Figures {
  series: Schemas["Timeseries"] | null;
  campaigns: Schemas["TopCampaigns"] | null;
  events: Schemas["TopEvents"] | null;
}

/** Email milestones over time, the best campaigns and the most tracked events of a period. */
export function Analytics() {
  const { project } = useSession();
  const [params, setParams] = useSearchParams();
  const asked = params.get("period");
  const period: Period = isPeriod(asked) ? asked : "30d";
  const metric: Metric = METRICS.find((m) => m.id === params.get("metric"))?.id ?? "openRate";
  const [figures, setFigures] = useState<Figures>({ series: null, campaigns: null, events: null });
  const [error, setError] = useState<string | null>(null);

  useEffect(() => {
    if (!project) return;
    let live = true;
    const { from, to, interval } = rangeOf(period, new Date());
    void Promise.all([
      api.GET("/analytics/timeseries", { params: { query: { from, to, interval, timezone: zone } } }),
      api.GET("/analytics/top-campaigns", { params: { query: { from, to, metric, limit: 10 } } }),
      api.GET("/analytics/top-events", { params: { query: { from, to, limit: 10 } } }),
    ]).then(([series, campaigns, events]) => {
      if (!live) return;
      setFigures({ series: series.data ?? null, campaigns: campaigns.data ?? null, events: events.data ?? null });
      const problem = series.error ?? campaigns.error ?? events.error;
      setError(problem ? errorMessage(problem) : null);
    });
    return () => {
      live = false;
    };
  }, [project, period, metric]);

  const choose = (key: string, value: string) => setParams({ period, metric, [key]: value });
  const { series, campaigns, events } = figures;
  const points = series?.data ?? [];
  const label = series ? seriesLabels(series) : String;
  const totals = SERIES.map((s) => ({ ...s, total: points.reduce((n, p) => n + p[s.key], 0) }));
  const m = METRICS.find((x) => x.id === metric)!;
  const periodName = PERIODS.find((p) => p.id === period)!.label.toLowerCase();

  return (
    <section>
      <h1>Analytics</h1>
      <div className="inline">
        <label htmlFor="analytics-period">Period</label>
        <select id="analytics-period" value={period} onChange={(e) => choose("period", e.target.value)}>
          {PERIODS.map((p) => (
            <option key={p.id} value={p.id}>
              {p.label}
            </option>
          ))}
        </select>
      </div>
      <Alert message={error} />

      <h2>Emails over time</h2>
      {series && (
        <ChartWithTable
          title={`Emails, ${periodName}, per ${series.interval} (${series.timezone})`}
          summary={totals.map((t) => `${t.label}: ${t.total.toLocaleString()}`).join(", ") + "."}
          chart={<TimeseriesChart points={points} label={label} />}
          details={`Emails per ${series.interval} as a table`}
          table={
            <SeriesTable
              region="Emails over time table"
              caption={`Emails per ${series.interval}`}
              hideCaption
              interval={series.interval}
              points={points}
              series={SERIES}
              label={label}
            />
          }
        />
      )}

      <h2>Top campaigns</h2>
      <div className="inline">
        <label htmlFor="analytics-metric">Rank campaigns by</label>
        <select id="analytics-metric" value={metric} onChange={(e) => choose("metric", e.target.value)}>
          {METRICS.map((x) => (
            <option key={x.id} value={x.id}>
              {x.label}
            </option>
          ))}
        </select>
      </div>
      {campaigns && campaigns.data.length === 0 && <p>No campaign started sending in this period.</p>}
      {campaigns && campaigns.data.length > 0 && (
        <ChartWithTable
          title={`Campaigns by ${m.label.toLowerCase()}`}
          summary={`${campaigns.data.length} ${campaigns.data.length === 1 ? "campaign" : "campaigns"}, best first.`}
          chart={
            <Bars
              data={campaigns.data.map((c) => ({ name: c.name, value: m.rate ? Math.round(c.value * 1000) / 10 : c.value }))}
              label={m.rate ? `${m.label} (%)` : m.label}
              color="#0550ae"
            />
          }
          table={
            <div className="scroll" tabIndex={0} role="region" aria-label="Top campaigns table">
              <table>
                <caption className="visually-hidden">Top campaigns</caption>
                <thead>
                  <tr>
                    <th scope="col">Campaign</th>
                    <th scope="col">{m.label}</th>
                    <th scope="col">Sent</th>
                    <th scope="col">Opened</th>
                    <th scope="col">Clicked</th>
                  </tr>
                </thead>
                <tbody>
                  {campaigns.data.map((c) => (
                    <tr key={c.id}>
                      <th scope="row">
                        <Link to={`/campaigns/${c.id}`}>{c.name}</Link>
                      </th>
                      <td>{m.rate ? percent(c.value) : c.value.toLocaleString()}</td>
                      <td>{c.stats.sent.toLocaleString()}</td>
                      <td>{c.stats.opened.toLocaleString()}</td>
                      <td>{c.stats.clicked.toLocaleString()}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          }
        />
      )}

      <h2>Top events</h2>
      {events && events.data.length === 0 && <p>No events were tracked in this period.</p>}
      {events && events.data.length > 0 && (
        <ChartWithTable
          title="Most tracked events"
          summary={`${events.data.length} ${events.data.length === 1 ? "name" : "names"}, most tracked first.`}
          chart={<Bars data={events.data.map((e) => ({ name: e.name, value: e.count }))} label="Events" color="#8250df" />}
          table={
            <div className="scroll" tabIndex={0} role="region" aria-label="Top events table">
              <table>
                <caption className="visually-hidden">Top events</caption>
                <thead>
                  <tr>
                    <th scope="col">Event</th>
                    <th scope="col">Times tracked</th>
                  </tr>
                </thead>
                <tbody>
                  {events.data.map((e) => (
                    <tr key={e.name}>
                      <th scope="row">
                        <Link to={`/events/names/${encodeURIComponent(e.name)}`}>{e.name}</Link>
                      </th>
                      <td>{e.count.toLocaleString()}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          }
        />
      )}
    </section>
  );
}
