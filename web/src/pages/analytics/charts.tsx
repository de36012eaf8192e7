// The analytics charts (recharts), and a time series as a table. The drawing is hidden from
// screen readers; every chart is followed by its figures as a table, its text alternative
// (ChartWithTable in ../parts). Both say a bucket the same way: `label`, from `seriesLabels`.
import { Bar, BarChart, CartesianGrid, Legend, Line, LineChart, ResponsiveContainer, Tooltip, XAxis, YAxis } from "recharts";
import type { Schemas } from "../../api/client";
import { bucketLabels } from "./buckets";

type Point = Schemas["TimeseriesPoint"];

export const SERIES: Series[] = [
  { key: "sent", label: "Sent", color: "#0550ae" },
  { key: "delivered", label: "Delivered", color: "#1a7f37" },
  { key: "opened", label: "Opened", color: "#8250df" },
  { key: "clicked", label: "Clicked", color: "#bf3989" },
  { key: "bounced", label: "Bounced", color: "#bc4c00" },
  { key: "complained", label: "Complaints", color: "#a40e26" },
];

export type Series = { key: keyof Omit<Point, "time" | "label">; label: string; color: string };

/** How a series' charts and tables say its buckets: "14:00", "Dec 8, 14:00", "Dec 8". */
export function seriesLabels(series: Schemas["Timeseries"]): (time: string) => string {
  return bucketLabels(
    series.data.map((p) => p.time),
    series.interval,
    series.timezone,
  );
}

/** A time series as a table, a row per point and a column per series: the text alternative of
 * its chart, scrolling sideways in a named region. */
export function SeriesTable({
  region,
  caption,
  hideCaption,
  interval,
  points,
  series,
  label,
}: {
  region: string;
  caption: string;
  hideCaption?: boolean;
  interval: string;
  points: Point[];
  series: readonly Series[];
  label: (time: string) => string;
}) {
  return (
    <div className="scroll" tabIndex={0} role="region" aria-label={region}>
      <table>
        <caption className={hideCaption ? "visually-hidden" : undefined}>{caption}</caption>
        <thead>
          <tr>
            <th scope="col">{interval === "hour" ? "Hour" : "Day"}</th>
            {series.map((s) => (
              <th scope="col" key={s.key}>
                {s.label}
              </th>
            ))}
          </tr>
        </thead>
        <tbody>
          {points.map((p) => (
            <tr key={p.time}>
              <th scope="row">
                <time dateTime={p.time}>{label(p.time)}</time>
              </th>
              {series.map((s) => (
                <td key={s.key}>{p[s.key].toLocaleString()}</td>
              ))}
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

/** A time series as lines, one per series, its buckets said by `label`. */
export function TimeseriesChart({
  points,
  label,
  series = SERIES,
  height = 300,
}: {
  points: Point[];
  label: (time: string) => string;
  series?: readonly Series[];
  height?: number;
}) {
  return (
    <ResponsiveContainer width="100%" height={height}>
      <LineChart data={points} accessibilityLayer={false} margin={{ top: 8, right: 16, bottom: 8, left: 0 }}>
        <CartesianGrid strokeDasharray="3 3" />
        <XAxis dataKey="time" tickFormatter={label} minTickGap={24} tick={{ fontSize: 12 }} />
        <YAxis allowDecimals={false} width={48} tick={{ fontSize: 12 }} />
        <Tooltip labelFormatter={(time) => label(String(time))} />
        <Legend />
        {series.map((s) => (
          <Line key={s.key} type="linear" dataKey={s.key} name={s.label} stroke={s.color} dot={false} isAnimationActive={false} />
        ))}
      </LineChart>
    </ResponsiveContainer>
  );
}

/** Horizontal bars, one per named item, longest first. */
export function Bars({ data, label, color }: { data: { name: string; value: number }[]; label: string; color: string }) {
  return (
    <ResponsiveContainer width="100%" height={Math.max(120, data.length * 36 + 40)}>
      <BarChart data={data} layout="vertical" accessibilityLayer={false} margin={{ top: 8, right: 16, bottom: 8, left: 8 }}>
        <CartesianGrid strokeDasharray="3 3" />
        <XAxis type="number" allowDecimals={false} />
        <YAxis type="category" dataKey="name" width={120} />
        <Tooltip />
        <Bar dataKey="value" name={label} fill={color} isAnimationActive={false} />
      </BarChart>
    </ResponsiveContainer>
  );
}
