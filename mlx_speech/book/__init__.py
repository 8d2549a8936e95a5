"""Long form: a book (plain text, Markdown or EPUB) read into chapters, its
sentences spoken many at a time and kept as they finish, so that a run
stopped at any moment resumes, and written out as one chaptered file."""
