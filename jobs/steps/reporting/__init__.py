"""The report step's page: gathering a run's records (``data``), the sections of the study and the gate, the charts,
the HTML and Markdown (``page``)."""
