/**
 * The peer's synth floor: one empty stack, so only Node and aws-cdk-lib loading are timed
 * (the same measure as bench/empty_app.py on our side).
 */
import * as cdk from "aws-cdk-lib";

const app = new cdk.App();
new cdk.Stack(app, "Empty");
app.synth();
