"""Views read only analysis results (a nsyscomm.api.Result), never the reports."""
