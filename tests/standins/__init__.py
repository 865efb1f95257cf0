"""Local stand-ins of cloud HTTP APIs (Cloud Build, GCS, Vertex AI, Artifact Registry KFP), on 127.0.0.1."""
