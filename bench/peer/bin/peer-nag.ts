/**
 * The peer app with cdk-nag's AWS Solutions checks, run the way the reference app runs them:
 * one AwsSolutionsChecks validation plugin on the app, so that every stack, nested ones
 * included, is checked once at synth, and a finding not acknowledged fails the synth.
 *
 * The peer's findings are acknowledged by their exact ids (../nag-acknowledged.json, written by
 * `python -m bench.peer --acknowledge`), on the app, with one reason: the benchmark measures
 * the checks' cost, and the peer's security posture is not what it compares.
 */
import { App, Validations } from "aws-cdk-lib";
import { AwsSolutionsChecks } from "cdk-nag";
import * as fs from "fs";
import * as path from "path";
import { loadFacts } from "../lib/facts";
import { buildPeer } from "../lib/reference";

const ACKNOWLEDGED = path.join(__dirname, "..", "..", "nag-acknowledged.json");
const REASON = "Benchmark peer: eks-blueprints' defaults are kept as they are; only the checks' cost is measured.";

const app = new App();
buildPeer(app, loadFacts())
  .then(() => {
    const findings: string[] = JSON.parse(fs.readFileSync(ACKNOWLEDGED, "utf8"));
    // The metadata Validations.acknowledge() records, written directly: aws-cdk-lib 2.261.0
    // refuses an id with a "::" inside (every IAM4 and IAM5 finding has one), which later
    // releases accept.
    app.node.addMetadata(
      Validations.ACKNOWLEDGED_RULES_METADATA_KEY,
      Object.fromEntries(findings.map((id) => [id, REASON])),
      { stackTrace: true },
    );
    Validations.of(app).addPlugins(new AwsSolutionsChecks(app, { verbose: true }));
    app.synth();
  })
  .catch((error: unknown) => {
    console.error(error);
    process.exitCode = 1;
  });
