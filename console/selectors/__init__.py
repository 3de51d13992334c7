"""The console's reads that pages, the API and the services share, one module per entity (HackSoft's
selectors): they write nothing and take no locks. Import the function from its module."""
