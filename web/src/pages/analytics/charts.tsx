// The analytics charts (recharts). The drawing is hidden from screen readers; every chart is
// followed by its figures as a table, its text alternative.
import type { ReactNode } from "react";
import { Bar, BarChart, CartesianGrid, Legend, Line, LineChart, ResponsiveContainer, Tooltip, XAxis, YAxis } from "recharts";
import type { Schemas } from "../../api/client";

type Point = Schemas["TimeseriesPoint"];

export const SERIES: { key: keyof Omit<Point, "time" | "label">; label: string; color: string }[] = [
  { key: "sent", label: "Sent", color: "#0550ae" },
  { key: "delivered", label: "Delivered", color: "#1a7f37" },
  { key: "opened", label: "Opened", color: "#8250df" },
  { key: "clicked", label: "Clicked", color: "#bf3989" },
  { key: "bounced", label: "Bounced", color: "#bc4c00" },
  { key: "complained", label: "Complaints", color: "#a40e26" },
];

/** A chart with its title and its text alternative. */
export function Figure({ title, summary, chart, table }: { title: string; summary: string; chart: ReactNode; table: ReactNode }) {
  return (
    <figure className="chart">
      <figcaption>
        <strong>{title}</strong>
        <span className="hint"> {summary}</span>
      </figcaption>
      <div className="chart-drawing" aria-hidden="true">
        {chart}
      </div>
      {table}
    </figure>
  );
}

export function TimeseriesChart({ points }: { points: Point[] }) {
  return (
    <ResponsiveContainer width="100%" height={300}>
      <LineChart data={points} accessibilityLayer={false} margin={{ top: 8, right: 16, bottom: 8, left: 0 }}>
        <CartesianGrid strokeDasharray="3 3" />
        <XAxis dataKey="label" minTickGap={24} />
        <YAxis allowDecimals={false} width={48} />
        <Tooltip />
        <Legend />
        {SERIES.map((s) => (
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
