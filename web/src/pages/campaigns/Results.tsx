import { useEffect, useState } from "react";
import { api, errorMessage, type Schemas } from "../../api/client";
import { SeriesTable, seriesLabels, TimeseriesChart } from "../analytics/charts";
import { Alert, ChartWithTable } from "../parts";
import { percent, type Campaign } from "./draft";
import { browserTimeZone, chartRange } from "./time";

const SERIES = [
  { key: "sent", label: "Sent", color: "#0550ae" },
  { key: "delivered", label: "Delivered", color: "#1a7f37" },
  { key: "opened", label: "Opened", color: "#8250df" },
  { key: "clicked", label: "Clicked", color: "#bc4c00" },
  { key: "bounced", label: "Bounced", color: "#a40e26" },
  { key: "complained", label: "Complained", color: "#57606a" },
] as const;

/** A campaign's figures, its emails over time and, for an A/B test, each variant's figures. */
export function Results({ campaign, refresh }: { campaign: Campaign; refresh: number }) {
  const [stats, setStats] = useState<Schemas["CampaignStats"] | null>(null);
  const [series, setSeries] = useState<Schemas["Timeseries"] | null>(null);
  const [error, setError] = useState<string | null>(null);

  useEffect(() => {
    let live = true;
    const range = chartRange(campaign.startedAt ?? null, new Date());
    void Promise.all([
      api.GET("/campaigns/{id}/stats", { params: { path: { id: campaign.id } } }),
      range ? api.GET("/analytics/timeseries", { params: { query: { ...range, timezone: browserTimeZone() } } }) : null,
    ]).then(([s, t]) => {
      if (!live) return;
      setStats(s.data ?? null);
      setSeries(t?.data ?? null);
      setError(s.error ? errorMessage(s.error) : t?.error ? errorMessage(t.error) : null);
    });
    return () => {
      live = false;
    };
  }, [campaign, refresh]);

  return (
    <section aria-labelledby="results-title">
      <h2 id="results-title">Results</h2>
      <Alert message={error} />
      {stats && <Figures stats={stats} />}
      {stats && stats.variants.length > 0 && <Variants stats={stats} campaign={campaign} />}
      {series && <Chart series={series} />}
    </section>
  );
}

function Figures({ stats: s }: { stats: Schemas["CampaignStats"] }) {
  const rate = (n: number) => (s.sent > 0 ? percent(n / s.sent) : "–");
  const rows: [string, number, string][] = [
    ["Recipients", s.recipients, ""],
    ["Sent", s.sent, ""],
    ["Delivered", s.delivered, rate(s.delivered)],
    ["Opened", s.opened, percent(s.openRate)],
    ["Clicked", s.clicked, percent(s.clickRate)],
    ["Bounced", s.bounced, percent(s.bounceRate)],
    ["Complained", s.complained, rate(s.complained)],
    ["Unsubscribed", s.unsubscribed, rate(s.unsubscribed)],
    ["Not sent (unsubscribed before the hand-off, or cancelled)", s.suppressed, ""],
    ["Failed", s.failed, ""],
    ["Waiting to be sent", s.queued, ""],
  ];
  return (
    <div className="table-scroll" tabIndex={0} role="region" aria-label="Results table">
      <table className="figures">
        <caption>Figures (rates are of the emails sent; opened includes clicked)</caption>
        <thead>
          <tr>
            <th scope="col">Emails</th>
            <th scope="col">Count</th>
            <th scope="col">Rate</th>
          </tr>
        </thead>
        <tbody>
          {rows.map(([label, n, r]) => (
            <tr key={label}>
              <th scope="row">{label}</th>
              <td>{n.toLocaleString()}</td>
              <td>{r}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

function Variants({ stats, campaign }: { stats: Schemas["CampaignStats"]; campaign: Campaign }) {
  const ab = campaign.abTest;
  const state = !ab
    ? ""
    : ab.status === "WINNER_CHOSEN"
      ? `The winner (by ${ab.winnerMetric === "OPEN_RATE" ? "open" : "click"} rate) went to the rest of the audience.`
      : ab.decideAt
        ? `The winner is chosen ${new Date(ab.decideAt).toLocaleString()}.`
        : "The test has not started.";
  return (
    <div className="table-scroll" tabIndex={0} role="region" aria-label="Variants table">
      <table>
        <caption>A/B test: each variant's test group. {state}</caption>
        <thead>
          <tr>
            <th scope="col">Variant</th>
            <th scope="col">Subject</th>
            <th scope="col">Recipients</th>
            <th scope="col">Sent</th>
            <th scope="col">Opened</th>
            <th scope="col">Clicked</th>
          </tr>
        </thead>
        <tbody>
          {stats.variants.map((v) => (
            <tr key={v.variant}>
              <th scope="row">
                {String.fromCharCode(65 + v.variant)}
                {v.winner ? " (winner)" : ""}
              </th>
              <td>{ab?.variants[v.variant]?.subject ?? ""}</td>
              <td>{v.recipients.toLocaleString()}</td>
              <td>{v.sent.toLocaleString()}</td>
              <td>
                {v.opened.toLocaleString()} ({percent(v.openRate)})
              </td>
              <td>
                {v.clicked.toLocaleString()} ({percent(v.clickRate)})
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

function Chart({ series }: { series: Schemas["Timeseries"] }) {
  const unit = series.interval === "hour" ? "hour" : "day";
  const rows = series.data.filter((p) => SERIES.some((s) => p[s.key] > 0));
  const label = seriesLabels(series);
  return (
    <ChartWithTable
      title={`Emails of the whole project per ${unit} (${series.timezone}) since this campaign started: the API's time series counts every email of the project, this campaign's and any other sent meanwhile.`}
      chart={<TimeseriesChart points={series.data} label={label} series={SERIES} height={260} />}
      details="The chart as a table"
      table={
        rows.length === 0 ? (
          <p>No email reached any of these steps in this range yet.</p>
        ) : (
          <SeriesTable
            region="Results over time table"
            caption={`Emails per ${unit} (${series.timezone}), the ${unit}s with any`}
            interval={unit}
            points={rows}
            series={SERIES}
            label={label}
          />
        )
      }
    />
  );
}
