-- prelude.node_ranks: node times ranked within their (phase, backend, op, role), for
-- percentiles.
--
-- profinfer_node_by_dur holds each node's dur under its (phase, backend, op, role) group number
-- (profinfer_node_group: the (phase, backend)'s number, from profinfer_phase_no, times a
-- million plus the (op, role)'s, from profinfer_op_role_no), sorted by both: a group's rows are consecutive and
-- their rowids rank them by dur, so a nearest-rank percentile is one rowid lookup (no window
-- function, no sort on text).

INCLUDE PERFETTO MODULE profinfer.prelude.nodes;

CREATE TABLE profinfer_phase_no AS
SELECT g.graph, g.phase, g.backend, p.no
FROM profinfer_graph g
JOIN (SELECT phase, backend, ROW_NUMBER() OVER (ORDER BY phase, backend) AS no
      FROM (SELECT DISTINCT phase, backend FROM profinfer_graph WHERE phase IS NOT NULL)) p
  USING (phase, backend);
CREATE UNIQUE INDEX profinfer_phase_no_id ON profinfer_phase_no (graph);

CREATE TABLE profinfer_op_role_no AS
SELECT a.arg_set_id, r.no, a.op, a.role
FROM profinfer_slice_args a
JOIN (SELECT op, role, ROW_NUMBER() OVER (ORDER BY op, role) AS no
      FROM (SELECT DISTINCT op, role FROM profinfer_slice_args WHERE op IS NOT NULL)) r
  USING (op, role);
CREATE UNIQUE INDEX profinfer_op_role_no_id ON profinfer_op_role_no (arg_set_id);

CREATE TABLE profinfer_node_group AS
SELECT p.no * 1000000 + r.no AS grp, p.phase, p.backend, r.op, r.role
FROM (SELECT DISTINCT no, phase, backend FROM profinfer_phase_no) p,
     (SELECT DISTINCT no, op, role FROM profinfer_op_role_no) r;
CREATE UNIQUE INDEX profinfer_node_group_id ON profinfer_node_group (grp);

CREATE TABLE profinfer_node_by_dur AS
SELECT p.no * 1000000 + r.no AS grp, n.dur
FROM profinfer_node_times n
JOIN profinfer_phase_no p USING (graph)
JOIN profinfer_op_role_no r ON r.arg_set_id = n.node_args
ORDER BY grp, n.dur;
