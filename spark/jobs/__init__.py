"""One script per report for ``spark-submit spark/jobs/<report>.py STORE... [--out DIR]``."""
