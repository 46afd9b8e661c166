"""spark-submit spark/jobs/time_histogram.py STORE... [--out DIR] (the ``time`` report)"""

from spark.jobs.submit import main

if __name__ == "__main__":
    main("time")
