// Every scenario, in the order the run prints them.
import { scenarios as nodeLocal } from './node-local.mjs';

export const scenarios = [...nodeLocal];

export function findScenario(id) {
  const scenario = scenarios.find((s) => s.id === id);
  if (!scenario) throw new Error(`no scenario ${id}`);
  return scenario;
}
