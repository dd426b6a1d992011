"""What the fitter (`training`, `make fit`) and the evaluation (`bench.evaluate`, `make eval`)
share, so that neither depends on the other: labelled decisions read from JSONL (`cases`), where
they are scored (`runners`: a container over HTTP or the engine in-process), the accuracy,
calibration and threshold figures (`metrics`, with `stats.percentile`, the one percentile of every
report and benchmark) and a policy file's text as the shipped files lay it out (`policy_file`)."""
