/**
 * What a model output means, and how a quantized (or pruned) model's output is judged against the
 * FP32 one for each meaning: class scores by top-1 agreement (and SQNR), per-step class scores by
 * sequence agreement, embeddings and hidden states by cosine and nearest-neighbour agreement, dense
 * maps by SQNR (and the thresholded map when it holds probabilities), a probability by its decision
 * at 0.5, a recurrent state not at all (the outputs of the steps it feeds are judged). The defaults
 * and the measurements behind them: docs/quantize.md, "What each output is judged on".
 * Pure. Imports: ./agreement (types), ./embedding.
 */
import { NEAR_TIE_NATS, type AgreementMetrics } from './agreement.js';
import { MAX_NEIGHBOUR_SAMPLES } from './embedding.js';

export const OUTPUT_KINDS = ['class-scores', 'class-sequence', 'embedding', 'dense-map', 'probability', 'state'] as const;
export type OutputKind = (typeof OUTPUT_KINDS)[number];

/** Other spellings `--output-kind` accepts. */
const ALIASES: Record<string, OutputKind> = Object.assign(Object.create(null) as Record<string, OutputKind>, {
  classes: 'class-scores',
  logits: 'class-scores',
  probabilities: 'class-scores',
  sequence: 'class-sequence',
  'hidden-state': 'embedding',
  features: 'embedding',
  map: 'dense-map',
  values: 'dense-map',
  'recurrent-state': 'state',
});

/** The kind a user wrote (an alias or a kind's name), or undefined. */
export function parseOutputKind(text: string): OutputKind | undefined {
  const t = text.trim().toLowerCase();
  return (OUTPUT_KINDS as readonly string[]).includes(t) ? (t as OutputKind) : ALIASES[t];
}

/** How the judged value of a class sequence is named in reports and failures. */
export const ODDS_AGREEMENT = 'odds-weighted sequence agreement';

export interface KindBudget {
  /** class-scores, class-sequence, dense-map: least SQNR (dB) against FP32. */
  minSqnrDb: number;
  /**
   * class-scores: least top-1 agreement; class-sequence: least sequence agreement weighted by
   * FP32's odds (sequenceOddsAgreement in ./agreement) (fractions).
   */
  minTop1Agreement: number;
  /** embedding: least mean cosine of the vectors (of each sample's pooled vector, for sequences). */
  minCosine: number;
  /** embedding: least nearest-neighbour agreement across the samples (judged from NEIGHBOURS_JUDGED_FROM samples). */
  minNeighbourAgreement: number;
  /** dense-map holding probabilities: least fraction of elements on the same side of 0.5. */
  minThresholdAgreement: number;
  /** probability: least fraction of decisions (at 0.5) kept. */
  minDecisionAgreement: number;
  /** probability: largest absolute error. */
  maxProbabilityError: number;
  /**
   * class-scores, class-sequence: the SQNR is reported, not judged (a retrained model, whose
   * decisions alone `optimize` judges: its logits moved with its weights).
   */
  classSqnrReported?: boolean;
}

/**
 * The defaults. Class scores: 20 dB and 95% top-1 agreement (measured on the issue-15 families,
 * DEFAULT_FIDELITY_BUDGET in app/quantize-fidelity.ts). Embeddings: a mean cosine of 0.99 and 80%
 * of the nearest neighbours kept (bench/output-kinds.ts, on 64 held-out samples as the guard sees
 * them: every INT8 variant of a conv embedding kept cosine >= 0.9986 and 85.9-90.6% of the
 * neighbours with the classifier's decisions at 96.4-97.9% of FP32's, while weight noise that cost
 * 10 points of decisions fell to 0.9944 and 79.7%; a sentence encoder's INT8 variants 0.9995+ and
 * 95.3-98.4%, its int4 0.977 and 57.8%). Probabilities: 95% of the decisions and no error over 0.1; probability
 * maps: 99% of the thresholded elements. docs/quantize.md, "What each output is judged on".
 */
export const DEFAULT_KIND_BUDGET: Readonly<KindBudget> = Object.freeze({
  minSqnrDb: 20,
  minTop1Agreement: 0.95,
  minCosine: 0.99,
  minNeighbourAgreement: 0.8,
  minThresholdAgreement: 0.99,
  minDecisionAgreement: 0.95,
  maxProbabilityError: 0.1,
});

/** Fewer samples than this: nearest-neighbour agreement is reported, not judged (one flip in 8 is 12.5%). */
export const NEIGHBOURS_JUDGED_FROM = 16;

export interface OutputJudgement {
  kind: OutputKind;
  /** The values it was judged on, in words ('top-1 agreement 98.4%, SQNR 31.2 dB'). */
  judgedOn: string;
  met: boolean;
  /** What missed, in words, each naming the output. */
  failures: string[];
  /** The value(s) that decide, short, for a table cell ('cos 0.9963, nn 100%'). */
  short: string;
}

/** A kind's floors in words ('mean cosine >= 0.99, nearest-neighbour agreement >= 90%'). */
export function describeKindBudget(kind: OutputKind, b: KindBudget): string {
  const p = (x: number): string => `${+(x * 100).toFixed(1)}%`;
  switch (kind) {
    case 'class-scores':
      return `${b.classSqnrReported ? '' : `SQNR >= ${b.minSqnrDb} dB, `}top-1 agreement >= ${p(b.minTop1Agreement)}`;
    case 'class-sequence':
      return `${b.classSqnrReported ? '' : `SQNR >= ${b.minSqnrDb} dB, `}${ODDS_AGREEMENT} >= ${p(b.minTop1Agreement)}`;
    case 'embedding':
      return `mean cosine >= ${b.minCosine}, nearest-neighbour agreement >= ${p(b.minNeighbourAgreement)}`;
    case 'dense-map':
      return `SQNR >= ${b.minSqnrDb} dB (probabilities: >= ${p(b.minThresholdAgreement)} thresholded agreement)`;
    case 'probability':
      return `decision agreement >= ${p(b.minDecisionAgreement)}, largest error <= ${b.maxProbabilityError}`;
    case 'state':
      return 'not judged';
  }
}

const pct = (x: number, digits = 1): string => `${(x * 100).toFixed(digits)}%`;
const db = (x: number): string => (Number.isFinite(x) ? `${x.toFixed(1)} dB` : x > 0 ? 'inf dB' : '-inf dB');

/** Judges one output of kind `kind` by its agreement with FP32 against `budget`. */
export function judgeOutput(name: string, kind: OutputKind, a: AgreementMetrics, budget: KindBudget): OutputJudgement {
  const failures: string[] = [];
  const on: string[] = [];
  const short: string[] = [];
  const floor = (value: number, min: number, what: string, shown: string, bound: string): void => {
    on.push(`${what} ${shown}`);
    if (!(value >= min)) failures.push(`'${name}': ${what} ${shown} < ${bound}`);
  };
  const sqnr = (): void => floor(a.sqnrDb, budget.minSqnrDb, 'SQNR', db(a.sqnrDb), `${budget.minSqnrDb} dB`);
  switch (kind) {
    case 'class-scores':
    case 'class-sequence':
      // Per-step scores [N, T, C] (declared so, or found so in the data): the argmax path of each sample.
      short.push(`SQNR ${db(a.sqnrDb)}`);
      if (budget.classSqnrReported) on.push(`SQNR ${db(a.sqnrDb)} (reported)`);
      else sqnr();
      if (a.sequenceAgreement !== undefined) {
        // Judged: each sample that differs counts FP32's own odds of its path (sequenceOddsAgreement).
        const odds = a.sequenceOddsAgreement ?? a.sequenceAgreement;
        short.push(`seq ${pct(a.sequenceAgreement)}`, `odds ${pct(odds)}`);
        on.push(`sequence agreement ${pct(a.sequenceAgreement)}`);
        floor(odds, budget.minTop1Agreement, ODDS_AGREEMENT, pct(odds), pct(budget.minTop1Agreement));
        if (!(odds >= budget.minTop1Agreement)) {
          failures[failures.length - 1] +=
            ` (samples whose argmax over the last axis matches FP32's at every step: ${pct(a.sequenceAgreement)}; per-step ${pct(a.stepAgreement!, 2)} of ${a.steps}; a differing sample counts FP32's odds of its path against its own, squared)`;
          const beyond = a.sequenceAgreementBeyondTies;
          // Where the flips are: a line that differs only at FP32's near-ties is not judged apart (reported).
          if (beyond !== undefined && beyond > a.sequenceAgreement)
            failures[failures.length - 1] += `; ${pct(beyond)} agree at every step where FP32's top two classes are ${NEAR_TIE_NATS} nats or more apart`;
        }
      } else if (a.top1Agreement !== null) {
        short.push(`agree ${pct(a.top1Agreement)}`);
        floor(a.top1Agreement, budget.minTop1Agreement, 'top-1 agreement', pct(a.top1Agreement), pct(budget.minTop1Agreement));
      }
      break;
    case 'embedding': {
      const e = a.embedding;
      const pooled = e?.pooledCosine;
      const cos = pooled?.mean ?? e?.vectorCosine.mean ?? a.cosineSimilarity;
      const what = pooled ? `mean cosine of the ${pooled.masked ? 'mask-pooled' : 'mean-pooled'} vectors` : 'mean cosine';
      floor(cos, budget.minCosine, what, cos.toFixed(4), `${budget.minCosine}`);
      short.push(`cos ${cos.toFixed(4)}`);
      if (e && e.neighbourAgreement !== null) short.push(`nn ${pct(e.neighbourAgreement, 0)}`);
      if (pooled && e) on.push(`per vector ${e.vectorCosine.mean.toFixed(4)}`);
      if (e && e.neighbourAgreement !== null) {
        const shown = `${pct(e.neighbourAgreement)} of ${Math.min(e.samples, MAX_NEIGHBOUR_SAMPLES)} samples`;
        if (e.samples >= NEIGHBOURS_JUDGED_FROM)
          floor(e.neighbourAgreement, budget.minNeighbourAgreement, 'nearest-neighbour agreement', shown, pct(budget.minNeighbourAgreement, 0));
        else on.push(`nearest-neighbour agreement ${shown} (not judged below ${NEIGHBOURS_JUDGED_FROM} samples)`);
      }
      on.push(`SQNR ${db(a.sqnrDb)} (not judged)`);
      break;
    }
    case 'dense-map':
      short.push(`SQNR ${db(a.sqnrDb)}`);
      if (a.unitInterval) short.push(`thr ${pct(a.thresholdAgreement)}`);
      sqnr();
      if (a.unitInterval)
        floor(
          a.thresholdAgreement,
          budget.minThresholdAgreement,
          'thresholded agreement (at 0.5)',
          pct(a.thresholdAgreement, 2),
          pct(budget.minThresholdAgreement),
        );
      break;
    case 'probability':
      short.push(`decisions ${pct(a.thresholdAgreement)}`);
      floor(a.thresholdAgreement, budget.minDecisionAgreement, 'decision agreement (at 0.5)', pct(a.thresholdAgreement), pct(budget.minDecisionAgreement));
      on.push(`largest error ${+a.maxAbsError.toPrecision(3)}`);
      if (!(a.maxAbsError <= budget.maxProbabilityError))
        failures.push(`'${name}': largest error ${+a.maxAbsError.toPrecision(3)} > ${budget.maxProbabilityError}`);
      break;
    case 'state':
      on.push('not judged (a recurrent state: the outputs of the steps it feeds are)');
      break;
  }
  return { kind, judgedOn: on.join(', '), met: failures.length === 0, failures, short: short.join(', ') || 'not judged' };
}
