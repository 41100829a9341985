/**
 * The peer app without cdk-nag: the reference platform built with eks-blueprints
 * (../lib/reference.ts), synthesized. `python -m bench.run` times it with the peer's pinned
 * CDK CLI beside our own reference app.
 */
import { App } from "aws-cdk-lib";
import { loadFacts } from "../lib/facts";
import { buildPeer } from "../lib/reference";

const app = new App();
buildPeer(app, loadFacts())
  .then(() => app.synth())
  .catch((error: unknown) => {
    console.error(error);
    process.exitCode = 1;
  });
