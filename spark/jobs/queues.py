"""spark-submit spark/jobs/queues.py STORE... [--out DIR]"""

from spark.jobs.submit import main

if __name__ == "__main__":
    main("queues")
