// HA figures for the tandem_subsystem gauge: state, epoch, applied LSN, and each
// backup's lag in changes.
import type { HaManager } from './ha-manager.js';

export function haMetrics(ha: HaManager | undefined): Record<string, number> {
  if (!ha) return {};
  const st = ha.status();
  const out: Record<string, number> = {
    ha_epoch: st.epoch,
    ha_lsn: st.lsn,
    ha_primary: ha.isPrimary ? 1 : 0,
    ha_ready_backups: st.backups.filter((b) => b.state === 'ready').length,
    ha_settlements_held: st.settlement?.held ? 1 : 0,
  };
  for (const b of st.backups) out[`ha_backup_lag:${b.id}`] = b.lag;
  return out;
}
